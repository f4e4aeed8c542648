/**
 * `WWW-Authenticate` parsing (RFC 9110 §11.6.1): a header value holds one or more comma-separated
 * challenges, each an auth-scheme followed by either a token68 or a list of `name=value` parameters
 * (value a token or a quoted-string). Several header lines are parsed as one comma-joined list.
 * Written here because the npm parsers either handle a single challenge only or reject the `service`
 * parameter registries send (checked: auth-header 1.0.0, http-auth-utils 6.0.1).
 */

export interface Challenge {
  /** Scheme as sent (compare case-insensitively). */
  scheme: string;
  /** Parameters with lower-cased names; quoted values unescaped. */
  params: Record<string, string>;
  token68?: string;
}

const TCHAR = /[!#$%&'*+\-.^_`|~0-9A-Za-z]/;
const TOKEN68 = /^[A-Za-z0-9\-._~+/]+=*(?=[ \t]*(?:,|$))/;

/**
 * Parses one or more `WWW-Authenticate` values into challenges, in order. Malformed fragments are
 * skipped rather than thrown on; a value with no recognisable challenge yields `[]`.
 */
export function parseChallenges(values: string | readonly string[] | undefined): Challenge[] {
  if (values === undefined) return [];
  const input = typeof values === 'string' ? values : values.join(', ');
  const out: Challenge[] = [];
  let current: Challenge | undefined;
  let pos = 0;

  const skip = (chars: string) => {
    while (pos < input.length && chars.includes(input[pos]!)) pos++;
  };
  const readToken = () => {
    const start = pos;
    while (pos < input.length && TCHAR.test(input[pos]!)) pos++;
    return input.slice(start, pos);
  };
  const readQuoted = () => {
    let value = '';
    pos++; // opening quote
    while (pos < input.length && input[pos] !== '"') {
      if (input[pos] === '\\' && pos + 1 < input.length) pos++;
      value += input[pos];
      pos++;
    }
    pos++; // closing quote (or end)
    return value;
  };

  while (pos < input.length) {
    skip(' \t,');
    if (pos >= input.length) break;
    const name = readToken();
    if (name === '') {
      pos++; // not a token character: drop it
      continue;
    }
    skip(' \t');
    if (input[pos] === '=' && current) {
      pos++;
      skip(' \t');
      const value = input[pos] === '"' ? readQuoted() : readToken();
      current.params[name.toLowerCase()] = value;
      continue;
    }
    if (input[pos] === '=') {
      // A parameter before any scheme: skip its value.
      pos++;
      skip(' \t');
      if (input[pos] === '"') readQuoted();
      else readToken();
      continue;
    }
    current = { scheme: name, params: {} };
    out.push(current);
    const m = TOKEN68.exec(input.slice(pos));
    if (m) {
      current.token68 = m[0];
      pos += m[0].length;
    }
  }
  return out;
}

/**
 * The challenge the client acts on: the first `Basic` or `Bearer` one when several are offered,
 * else the first one (go-containerregistry ping, docs/wire-contract.md#oci-registry).
 */
export function pickChallenge(challenges: readonly Challenge[]): Challenge | undefined {
  return challenges.find((c) => /^(basic|bearer)$/i.test(c.scheme)) ?? challenges[0];
}

/** Scopes named in a challenge's `scope` parameter (space-separated), in order. */
export function challengeScopes(challenge: Challenge | undefined): string[] {
  const raw = challenge?.params.scope;
  return raw ? raw.split(' ').filter((s) => s !== '') : [];
}
