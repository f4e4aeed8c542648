/**
 * The custom search attributes every entity workflow upserts (src/workflows/search-attributes.ts) must
 * exist in the Temporal namespace, or every workflow task fails with `BadSearchAttributes` and no CR ever
 * progresses while the process looks healthy. At start the worker checks them and registers the missing
 * ones through the operator service (allowed on the dev server and on self-hosted clusters); where that is
 * not allowed (Temporal Cloud, a restricted identity) it refuses to start with one line naming the missing
 * attributes and the command that creates them.
 */
import type { NativeConnection } from '@temporalio/worker';
import { SearchAttributes } from './api/keys.js';
import { ConfigError } from './config.js';
import type { Logger } from './log.js';

/** temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD (the wire enum value). */
const INDEXED_VALUE_TYPE_KEYWORD = 2;
/** gRPC status NOT_FOUND (an unknown namespace). */
const GRPC_NOT_FOUND = 5;

/** The attributes the workflows need, all of type Keyword. */
export const requiredSearchAttributes: readonly string[] = Object.values(SearchAttributes);

/** The two operator-service calls used here (a NativeConnection's `operatorService`; a fake in tests). */
export type SearchAttributeService = Pick<
  NativeConnection['operatorService'],
  'listSearchAttributes' | 'addSearchAttributes'
>;

/** The CLI command that creates `names` (Keyword) in `namespace`, for the refusal message and docs. */
export function createCommand(namespace: string, names: readonly string[]): string {
  return `temporal operator search-attribute create --namespace ${namespace} ${names.map((n) => `--name ${n}`).join(' ')} --type Keyword`;
}

async function customAttributes(
  service: SearchAttributeService,
  namespace: string,
): Promise<Record<string, number>> {
  try {
    const res = await service.listSearchAttributes({ namespace });
    return (res.customAttributes ?? {}) as Record<string, number>;
  } catch (err) {
    if ((err as { code?: unknown }).code === GRPC_NOT_FOUND) {
      throw new ConfigError('TEMPORAL_NAMESPACE', `namespace "${namespace}" does not exist`);
    }
    throw err;
  }
}

/**
 * Makes sure `namespace` has every required search attribute as a Keyword, registering the missing ones.
 * Resolves with the names it registered (empty when all were there).
 * @throws ConfigError naming TEMPORAL_NAMESPACE when an attribute exists with another type, when the
 *   namespace does not exist, or when registering is refused (the message carries the CLI command);
 *   any other error of the list call as is (the caller treats it as a startup failure).
 */
export async function ensureSearchAttributes(
  service: SearchAttributeService,
  namespace: string,
  log: Logger,
): Promise<string[]> {
  const have = await customAttributes(service, namespace);
  const wrongType = requiredSearchAttributes.filter(
    (n) => have[n] !== undefined && have[n] !== INDEXED_VALUE_TYPE_KEYWORD,
  );
  if (wrongType.length > 0) {
    throw new ConfigError(
      'TEMPORAL_NAMESPACE',
      `namespace "${namespace}" has search attribute(s) ${wrongType.join(', ')} with a type other than Keyword; the operator needs them as Keyword`,
    );
  }
  const missing = requiredSearchAttributes.filter((n) => have[n] === undefined);
  if (missing.length === 0) return [];
  try {
    await service.addSearchAttributes({
      namespace,
      searchAttributes: Object.fromEntries(missing.map((n) => [n, INDEXED_VALUE_TYPE_KEYWORD])),
    });
  } catch (err) {
    // Another replica may have added them meanwhile (ALREADY_EXISTS): what counts is what is there now.
    const now = await customAttributes(service, namespace);
    const still = missing.filter((n) => now[n] === undefined);
    if (still.length > 0) {
      const why = ((err as Error).message ?? String(err)).split('\n')[0];
      throw new ConfigError(
        'TEMPORAL_NAMESPACE',
        `namespace "${namespace}" lacks the search attributes ${still.join(', ')} (Keyword) and registering them failed (${why}); create them with: ${createCommand(namespace, still)}`,
      );
    }
  }
  log.info({ namespace, searchAttributes: missing }, 'registered missing search attributes');
  return missing;
}
