/**
 * OCI registry client used by the activities (docs/wire-contract.md#oci-registry): the two-call
 * {@link Registry} interface, its production implementation and the credential keychains.
 */
export { type Challenge, challengeScopes, parseChallenges, pickChallenge } from './challenge.js';
export {
  DEFAULT_REQUEST_TIMEOUT_MS,
  DELETE_ACTIONS,
  MANIFEST_ACCEPT,
  OCIRegistryClient,
  type OCIRegistryClientOptions,
  PULL_ACTIONS,
  registryFromEnv,
} from './client.js';
export {
  type AccessTokenSource,
  type CredentialTarget,
  DockerConfigKeychain,
  type DockerConfigKeychainOptions,
  defaultKeychain,
  GoogleKeychain,
  isGoogleRegistry,
  type Keychain,
  multiKeychain,
  type RegistryCredentials,
  type RegistryLogger,
} from './credentials.js';
export { DEFAULT_RETRY, type RetryPolicy } from './http.js';
export { allowsHttpFallback, manifestRef, parseRegistryBase, type RegistryBase } from './reference.js';
export {
  hasHibernateSnapshot,
  isRegistryError,
  type Registry,
  type RegistryCallOptions,
  RegistryError,
  type RegistryErrorKind,
} from './types.js';
