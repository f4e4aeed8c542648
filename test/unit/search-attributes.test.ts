import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config.js';
import {
  createCommand,
  ensureSearchAttributes,
  requiredSearchAttributes,
  type SearchAttributeService,
} from '../../src/search-attributes.js';

const log = pino({ level: 'silent' });
const KEYWORD = 2;
const TEXT = 1;

/** Fake operator service: a namespace's custom attributes; `refuse` makes adding fail like Temporal Cloud. */
function fakeService(initial: Record<string, number>, refuse?: Error) {
  const attrs = { ...initial };
  const added: Array<Record<string, number>> = [];
  const service = {
    async listSearchAttributes() {
      return { customAttributes: { ...attrs } };
    },
    async addSearchAttributes(req: { searchAttributes?: Record<string, number> | null }) {
      if (refuse) throw refuse;
      added.push({ ...req.searchAttributes });
      Object.assign(attrs, req.searchAttributes);
      return {};
    },
  } as unknown as SearchAttributeService;
  return { service, attrs, added };
}

describe('ensureSearchAttributes', () => {
  it('registers the missing attributes as Keyword and leaves present ones alone', async () => {
    const { service, attrs, added } = fakeService({ CocoonNamespace: KEYWORD });
    const registered = await ensureSearchAttributes(service, 'fresh', log);
    expect(registered).toEqual(['CocoonVMName', 'CocoonPhase', 'CocoonKind']);
    expect(added).toEqual([{ CocoonVMName: KEYWORD, CocoonPhase: KEYWORD, CocoonKind: KEYWORD }]);
    for (const n of requiredSearchAttributes) expect(attrs[n]).toBe(KEYWORD);
  });

  it('does nothing when all are there', async () => {
    const { service, added } = fakeService(
      Object.fromEntries(requiredSearchAttributes.map((n) => [n, KEYWORD])),
    );
    expect(await ensureSearchAttributes(service, 'default', log)).toEqual([]);
    expect(added).toEqual([]);
  });

  it('refuses with one line naming the missing attributes and the command when registering is not allowed', async () => {
    const refusal = Object.assign(new Error('7 PERMISSION_DENIED: Request unauthorized.\nmore'), { code: 7 });
    const { service } = fakeService({ CocoonKind: KEYWORD }, refusal);
    const err = await ensureSearchAttributes(service, 'prod', log).catch((e) => e);
    expect(err).toBeInstanceOf(ConfigError);
    const msg = (err as Error).message;
    expect(msg).not.toContain('\n');
    expect(msg).toBe(
      'TEMPORAL_NAMESPACE: namespace "prod" lacks the search attributes CocoonNamespace, CocoonVMName, CocoonPhase (Keyword) and registering them failed (7 PERMISSION_DENIED: Request unauthorized.); create them with: temporal operator search-attribute create --namespace prod --name CocoonNamespace --name CocoonVMName --name CocoonPhase --type Keyword',
    );
  });

  it('accepts a failed add when another replica registered them meanwhile', async () => {
    const all = Object.fromEntries(requiredSearchAttributes.map((n) => [n, KEYWORD]));
    let calls = 0;
    const service = {
      async listSearchAttributes() {
        calls++;
        return { customAttributes: calls === 1 ? {} : all };
      },
      async addSearchAttributes() {
        throw Object.assign(new Error('6 ALREADY_EXISTS'), { code: 6 });
      },
    } as unknown as SearchAttributeService;
    expect(await ensureSearchAttributes(service, 'ns', log)).toEqual(requiredSearchAttributes);
  });

  it('refuses an attribute of another type and an unknown namespace', async () => {
    const { service } = fakeService({ CocoonPhase: TEXT });
    await expect(ensureSearchAttributes(service, 'ns', log)).rejects.toThrow(
      /CocoonPhase with a type other than Keyword/,
    );
    const missingNs = {
      async listSearchAttributes() {
        throw Object.assign(new Error('5 NOT_FOUND: namespace nope is not found.'), { code: 5 });
      },
    } as unknown as SearchAttributeService;
    await expect(ensureSearchAttributes(missingNs, 'nope', log)).rejects.toThrow(
      'TEMPORAL_NAMESPACE: namespace "nope" does not exist',
    );
  });

  it('createCommand is a valid temporal CLI line', () => {
    expect(createCommand('ns', ['A', 'B'])).toBe(
      'temporal operator search-attribute create --namespace ns --name A --name B --type Keyword',
    );
  });
});
