/**
 * Logging: one pino root logger writing JSON lines to stdout, with the level from OPERATOR_LOG_LEVEL
 * (docs/observability.md#logs; the reference writes zerolog console lines, this port writes JSON so log
 * pipelines can parse it; `LOG_FORMAT=pretty`, which `npm run dev` sets, writes readable lines instead,
 * see docs/observability.md#logs). The Temporal runtime (core, worker, workflow and activity loggers) is
 * routed into the same logger through {@link temporalLogger}.
 */
import {
  ApplicationFailure,
  type LogMetadata,
  type Logger as TemporalLogger,
  type LogLevel as TemporalLogLevel,
} from '@temporalio/common';
import { type DestinationStream, type Logger as PinoLogger, pino } from 'pino';
import type { LogFormat, LogLevelName } from './config.js';

/** The operator's logger type (a pino logger); modules take it as a dependency and call `.child()`. */
export type Logger = PinoLogger;

/**
 * Creates the root logger: JSON lines with `time` (epoch ms), `level` as a label (`"info"`), `name`
 * (`cocoon-operator`), `pid`, `hostname`, `msg`; children add `component`.
 * `destination` defaults to stdout (synchronous writes, so lines are not lost on exit).
 */
export function createLogger(
  level: LogLevelName = 'info',
  destination?: DestinationStream,
  format: LogFormat = 'json',
): Logger {
  const stdout = pino.destination({ dest: 1, sync: true });
  return pino(
    {
      level,
      name: 'cocoon-operator',
      formatters: { level: (label) => ({ level: label }) },
    },
    format === 'pretty' ? prettyDestination(destination ?? stdout) : (destination ?? stdout),
  );
}

/** Fields every line carries that the pretty form leaves out or places itself. */
const PRETTY_OMIT = new Set(['time', 'level', 'name', 'pid', 'hostname', 'msg', 'component', 'err']);

/**
 * Formats one pino JSON line as `HH:MM:SS.mmm LEVEL [component] msg key=value …` (local time), with an
 * error's stack on the following lines. A line that is not JSON passes through unchanged.
 */
export function prettyLine(json: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(json);
  } catch {
    return json.endsWith('\n') ? json : `${json}\n`;
  }
  const t = new Date(typeof o.time === 'number' ? o.time : Date.now());
  const pad = (n: number, w = 2) => String(n).padStart(w, '0');
  const clock = `${pad(t.getHours())}:${pad(t.getMinutes())}:${pad(t.getSeconds())}.${pad(t.getMilliseconds(), 3)}`;
  const level = String(o.level ?? '')
    .toUpperCase()
    .padEnd(5);
  const component = typeof o.component === 'string' ? ` [${o.component}]` : '';
  const fields = Object.entries(o)
    .filter(([k]) => !PRETTY_OMIT.has(k))
    .map(([k, v]) => `${k}=${typeof v === 'string' && !/\s/.test(v) ? v : JSON.stringify(v)}`);
  const err = o.err as { message?: string; stack?: string } | string | undefined;
  const errText =
    err === undefined
      ? ''
      : typeof err === 'string'
        ? ` err=${err}`
        : `\n    ${(err.stack ?? err.message ?? '').replaceAll('\n', '\n    ')}`;
  return `${clock} ${level}${component} ${o.msg ?? ''}${fields.length ? `  ${fields.join(' ')}` : ''}${errText}\n`;
}

/** A pino destination that writes {@link prettyLine}s to `out`. */
export function prettyDestination(out: DestinationStream): DestinationStream {
  return { write: (line: string) => out.write(prettyLine(line)) };
}

const LEVEL_MAP: Record<TemporalLogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = {
  TRACE: 'trace',
  DEBUG: 'debug',
  INFO: 'info',
  WARN: 'warn',
  ERROR: 'error',
};

/** The most verbose Temporal level the pino level lets through (for the core log filter). */
export function temporalLevelFor(level: LogLevelName): TemporalLogLevel {
  switch (level) {
    case 'trace':
      return 'TRACE';
    case 'debug':
      return 'DEBUG';
    case 'info':
      return 'INFO';
    case 'warn':
      return 'WARN';
    default:
      return 'ERROR';
  }
}

/** The SDK's context fields of a workflow log line that `quietSdk` leaves out (the workflow id stays). */
const WORKFLOW_CONTEXT = new Set(['sdkComponent', 'taskQueue', 'namespace', 'runId', 'workflowType']);

/**
 * An activity failure our code raised on purpose (an ApplicationFailure: a registry or Kubernetes error
 * whose message says everything) as the string `<type>: <message>`: its stack only shows where it was
 * wrapped, and repeated on every attempt it buried the operator log (found by a new-user run). Any other
 * error (a bug) keeps its stack.
 */
function stackless(err: unknown): unknown {
  if (!(err instanceof ApplicationFailure)) return err;
  return `${err.type ?? 'ApplicationFailure'}: ${err.message}`;
}

/**
 * Adapts a pino logger to Temporal's Logger interface (Runtime.install({logger})). Metadata becomes
 * fields of the JSON line; Temporal's `sdkComponent` field tells core/worker/workflow/activity apart.
 */
export function temporalLogger(log: Logger, opts: { quietSdk?: boolean } = {}): TemporalLogger {
  const emit = (level: TemporalLogLevel, message: string, meta?: LogMetadata) => {
    // `quietSdk` (a person reading LOG_FORMAT=pretty at info): the SDK's own info lines (worker states, a
    // workflow bundle's webpack report) are noise there; the workflows' lines (their transitions) are not.
    const low = level === 'INFO' || level === 'DEBUG' || level === 'TRACE';
    if (opts.quietSdk && low && meta?.sdkComponent !== 'workflow') return;
    // The SDK warns "No workflows registered, not polling" for every activity-only worker; this process runs
    // two by design (the registry task queues), so the warning says nothing wrong: keep it at debug.
    const expected = message.startsWith('No workflows registered');
    const method = expected ? 'debug' : (LEVEL_MAP[level] ?? 'info');
    const fields: Record<string, unknown> = {};
    if (meta) {
      for (const [k, v] of Object.entries(meta)) {
        // Read by a person, a workflow's line names its workflow id; the rest of the SDK's context is noise.
        if (opts.quietSdk && WORKFLOW_CONTEXT.has(k)) continue;
        // Core log records carry a bigint `timestampNanos`; JSON cannot hold bigints.
        fields[k === 'error' ? 'err' : k] =
          typeof v === 'bigint' ? v.toString() : k === 'error' ? stackless(v) : v;
      }
    }
    log[method](fields, message);
  };
  return {
    log: emit,
    trace: (m, meta) => emit('TRACE', m, meta),
    debug: (m, meta) => emit('DEBUG', m, meta),
    info: (m, meta) => emit('INFO', m, meta),
    warn: (m, meta) => emit('WARN', m, meta),
    error: (m, meta) => emit('ERROR', m, meta),
  };
}
