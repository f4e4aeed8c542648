/**
 * Logging: one pino root logger writing JSON lines to stdout, with the level from OPERATOR_LOG_LEVEL
 * (spec/operator-shell.md §5; the reference writes zerolog console lines, this port writes JSON so log
 * pipelines can parse it). The Temporal runtime (core, worker, workflow and activity loggers) is routed
 * into the same logger through {@link temporalLogger}.
 */
import type { LogMetadata, Logger as TemporalLogger, LogLevel as TemporalLogLevel } from '@temporalio/common';
import { type DestinationStream, type Logger as PinoLogger, pino } from 'pino';
import type { LogLevelName } from './config.js';

/** The operator's logger type (a pino logger); modules take it as a dependency and call `.child()`. */
export type Logger = PinoLogger;

/**
 * Creates the root logger: JSON lines with `time` (epoch ms), `level` as a label (`"info"`), `name`
 * (`cocoon-operator`), `pid`, `hostname`, `msg`; children add `component`.
 * `destination` defaults to stdout (synchronous writes, so lines are not lost on exit).
 */
export function createLogger(level: LogLevelName = 'info', destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      name: 'cocoon-operator',
      formatters: { level: (label) => ({ level: label }) },
    },
    destination ?? pino.destination({ dest: 1, sync: true }),
  );
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

/**
 * Adapts a pino logger to Temporal's Logger interface (Runtime.install({logger})). Metadata becomes
 * fields of the JSON line; Temporal's `sdkComponent` field tells core/worker/workflow/activity apart.
 */
export function temporalLogger(log: Logger): TemporalLogger {
  const emit = (level: TemporalLogLevel, message: string, meta?: LogMetadata) => {
    const method = LEVEL_MAP[level] ?? 'info';
    const fields: Record<string, unknown> = {};
    if (meta) {
      for (const [k, v] of Object.entries(meta)) {
        // Core log records carry a bigint `timestampNanos`; JSON cannot hold bigints.
        fields[k === 'error' ? 'err' : k] = typeof v === 'bigint' ? v.toString() : v;
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
