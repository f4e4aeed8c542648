/**
 * One ordered record of the requests the counting proxies (test/support/kube-proxy.ts in front of the
 * kube-apiserver, test/support/registry-proxy.ts in front of the registry) forwarded, so a test can cut
 * the operator's traffic into reconcile passes and name each request by its method and path template.
 */

/** Where a request went. */
export type RequestTarget = 'kube' | 'registry';

/**
 * What produced a Kubernetes request, as far as the wire tells: `watch` (a `?watch=true` stream of an
 * informer), `informer-list` (an informer's paginated list: `?limit=` without a label selector; the
 * informers list whole namespaces), or `call` (anything else: the activities' reads and writes, including
 * the CocoonSet pass's paged pod read by label). Registry requests are always `call`.
 */
export type RequestOrigin = 'watch' | 'informer-list' | 'call';

/** One forwarded request. */
export interface RecordedRequest {
  /** Position in the log (0, 1, 2, …; the order of forwarding), shared by every proxy writing to it. */
  seq: number;
  /** Epoch ms when the proxy forwarded it. */
  at: number;
  target: RequestTarget;
  /** HTTP method as sent. */
  method: string;
  /** Path without the query string. */
  path: string;
  /** Query parameters (last value wins). */
  query: Record<string, string>;
  origin: RequestOrigin;
  /**
   * Kubernetes verb (`GET` of one object, `LIST`, `WATCH`, `CREATE`, `UPDATE`, `PATCH`, `DELETE`) or the
   * HTTP method for the registry.
   */
  verb: string;
  /**
   * `<verb> <path template>`: namespace and object names replaced by `{ns}` and `{name}`, the
   * CocoonSet-relevant query keys kept, e.g. `LIST /api/v1/namespaces/{ns}/pods?labelSelector`; for the
   * registry the repository becomes `{repo}` and the tag stays: `HEAD /v2/{repo}/manifests/hibernate`.
   */
  template: string;
  /** HTTP status of the upstream answer, once known (undefined for a transport failure). */
  status?: number;
  /**
   * What a Kubernetes write wrote, once its body was read: the created object's name (`pod steady-2`,
   * `event Hibernated on CocoonHibernation/x`), the annotation keys a merge patch sets or removes
   * (`annotations +a -b`), `status`, `finalizers`. Undefined for reads and the registry.
   */
  detail?: string;
}

/** A request as named before it is logged (no position yet). */
export type RequestInfo = Omit<RecordedRequest, 'seq' | 'at' | 'status' | 'detail'>;

/** Query keys that distinguish requests worth telling apart in a breakdown. */
const KEPT_QUERY_KEYS = ['labelSelector', 'fieldSelector', 'watch'];

/**
 * Verb and path template of a Kubernetes API request (`/api/v1/...` or `/apis/<group>/<version>/...`).
 * Pure. Unknown shapes keep their path as is.
 */
export function kubeTemplate(
  method: string,
  path: string,
  query: Record<string, string>,
): { verb: string; template: string } {
  const parts = path.split('/').filter((p) => p !== '');
  // Prefix: api/v1 (core) or apis/<group>/<version>.
  const prefixLen = parts[0] === 'api' ? 2 : parts[0] === 'apis' ? 3 : -1;
  if (prefixLen < 0 || parts.length <= prefixLen) return { verb: method, template: `${method} ${path}` };
  const out = parts.slice(0, prefixLen);
  let rest = parts.slice(prefixLen);
  if (rest[0] === 'namespaces' && rest.length >= 3) {
    out.push('namespaces', '{ns}');
    rest = rest.slice(2);
  }
  // rest = [resource] | [resource, name] | [resource, name, subresource]
  const resource = rest[0]!;
  out.push(resource);
  const named = rest.length >= 2;
  if (named) out.push('{name}', ...rest.slice(2));
  let verb: string;
  switch (method) {
    case 'GET':
      verb = named ? 'GET' : query.watch === 'true' || query.watch === '1' ? 'WATCH' : 'LIST';
      break;
    case 'POST':
      verb = 'CREATE';
      break;
    case 'PUT':
      verb = 'UPDATE';
      break;
    default:
      verb = method;
  }
  const keys = KEPT_QUERY_KEYS.filter((k) => k in query && k !== 'watch');
  const q = keys.length > 0 ? `?${keys.join('&')}` : '';
  return { verb, template: `${verb} /${out.join('/')}${q}` };
}

type Obj = {
  metadata?: { name?: string; annotations?: Record<string, unknown>; finalizers?: unknown };
  involvedObject?: { kind?: string; name?: string };
  reason?: string;
  status?: unknown;
};

/** A short description of what a write request's JSON body writes (see RecordedRequest.detail). */
function writeDetail(rec: RecordedRequest, body: string): string | undefined {
  let o: Obj;
  try {
    o = JSON.parse(body) as Obj;
  } catch {
    return undefined;
  }
  const resource = rec.path
    .split('/')
    .filter(Boolean)
    .at(rec.path.endsWith('/status') ? -3 : -2);
  if (rec.verb === 'CREATE') {
    if (o.involvedObject)
      return `event ${o.reason ?? ''} on ${o.involvedObject.kind}/${o.involvedObject.name}`;
    return `${rec.path.split('/').at(-1)} ${o.metadata?.name ?? ''}`;
  }
  if (rec.verb === 'UPDATE')
    return `${resource} full update (finalizers ${JSON.stringify(o.metadata?.finalizers ?? [])})`;
  if (rec.verb === 'PATCH') {
    const parts: string[] = [];
    const ann = o.metadata?.annotations;
    if (ann) {
      const keys = Object.keys(ann).sort();
      const shown = (v: unknown) => (String(v).length > 40 ? `${String(v).slice(0, 37)}...` : String(v));
      parts.push(
        `annotations ${keys.map((k) => (ann[k] === null ? `-${k}` : `+${k}=${shown(ann[k])}`)).join(' ')}`,
      );
    }
    if (o.status !== undefined) parts.push('status');
    if (o.metadata?.finalizers !== undefined) parts.push('finalizers');
    return parts.join(', ') || undefined;
  }
  return undefined;
}

/** Path template of a registry request: `/v2/{repo}/manifests/<tag>`, `/v2/{repo}/blobs/{digest}`, `/v2/`. */
export function registryTemplate(method: string, path: string): string {
  const m = /^\/v2\/(.+)\/(manifests|blobs)\/([^/]+)$/.exec(path);
  if (!m) return `${method} ${path}`;
  const ref = m[2] === 'blobs' || m[3]!.includes(':') ? '{digest}' : m[3]!;
  return `${method} /v2/{repo}/${m[2]}/${ref}`;
}

function parseQuery(url: string): { path: string; query: Record<string, string> } {
  const u = new URL(url, 'http://x');
  const query: Record<string, string> = {};
  for (const [k, v] of u.searchParams) query[k] = v;
  return { path: u.pathname, query };
}

/** The shared, append-only request log. */
export class RequestLog {
  readonly records: RecordedRequest[] = [];

  /** Names a request (verb, template, origin) without logging it; see {@link append}. */
  classify(target: RequestTarget, method: string, url: string): RequestInfo {
    const { path, query } = parseQuery(url);
    let verb: string;
    let template: string;
    let origin: RequestOrigin = 'call';
    if (target === 'kube') {
      ({ verb, template } = kubeTemplate(method, path, query));
      if (verb === 'WATCH') origin = 'watch';
      else if (verb === 'LIST' && query.limit !== undefined && query.labelSelector === undefined)
        origin = 'informer-list';
    } else {
      verb = method;
      template = registryTemplate(method, path);
    }
    return { target, method, path, query, origin, verb, template };
  }

  /**
   * Logs a request as it is forwarded upstream (so the log's order is the order requests reached the
   * apiserver and registry, also for a request a proxy parked first). Returns the record; the proxy
   * fills `status` and `detail` later.
   */
  append(info: RequestInfo): RecordedRequest {
    const r: RecordedRequest = { ...info, seq: this.records.length, at: Date.now() };
    this.records.push(r);
    return r;
  }

  /** `append(classify(…))`: logs a request forwarded at once. */
  record(target: RequestTarget, method: string, url: string): RecordedRequest {
    return this.append(this.classify(target, method, url));
  }

  /** Fills `rec.detail` from the request body a proxy read (JSON; anything else is left undescribed). */
  describe(rec: RecordedRequest, body: string): void {
    rec.detail = writeDetail(rec, body);
  }

  /** The next sequence number: records from a later `since(mark)` are those received after this call. */
  mark(): number {
    return this.records.length;
  }

  /** Records with `seq >= from` (and `< to` when given). */
  since(from: number, to?: number): RecordedRequest[] {
    return this.records.slice(from, to);
  }
}

/**
 * Counts of each template in `records`, most frequent first, then by template: e.g.
 * `[['GET /apis/…/cocoonsets/{name}', 1], ['LIST /api/v1/namespaces/{ns}/pods?labelSelector', 1]]`.
 */
export function breakdown(records: readonly RecordedRequest[]): [string, number][] {
  const m = new Map<string, number>();
  for (const r of records) {
    const key = `${r.target === 'registry' ? 'registry ' : ''}${r.template}`;
    m.set(key, (m.get(key) ?? 0) + 1);
  }
  return [...m.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
}

/** A breakdown as indented lines (`  2 × CREATE /api/v1/namespaces/{ns}/pods`), or `  (none)`. */
export function formatBreakdown(records: readonly RecordedRequest[]): string {
  const rows = breakdown(records);
  if (rows.length === 0) return '  (none)';
  return rows.map(([t, n]) => `  ${n} × ${t}`).join('\n');
}

/**
 * Records in order, one per line: `  #<seq> <template> → <status>  <detail>` (registry lines prefixed
 * `registry`), or `  (none)`.
 */
export function formatSequence(records: readonly RecordedRequest[]): string {
  if (records.length === 0) return '  (none)';
  return records
    .map((r) => {
      const what = `${r.target === 'registry' ? 'registry ' : ''}${r.template}`;
      const status = r.status === undefined ? '' : ` → ${r.status}`;
      const detail = r.detail ? `  (${r.detail})` : '';
      return `  #${r.seq} ${what}${status}${detail}`;
    })
    .join('\n');
}
