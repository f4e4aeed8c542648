/**
 * A KubeConfig for a plain-HTTP (or self-signed) API server at `url` with no credentials, for unit tests that
 * fake the apiserver with a local HTTP server.
 */
import { KubeConfig } from '@kubernetes/client-node';

/** One cluster, one anonymous user, TLS verification off; e.g. `kubeConfigFor('http://127.0.0.1:41234')`. */
export function kubeConfigFor(url: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: url, skipTLSVerify: true }],
    users: [{ name: 'u' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return kc;
}
