/**
 * The Temporal connect retry names the setting when the error is a misconfiguration (src/worker.ts
 * `temporalConnectHint`). The plaintext case is the SDK's real message for `tls: true` against the local
 * stack's dev server (captured with `NativeConnection.connect({ address, tls: true })`).
 */
import { describe, expect, it } from 'vitest';
import { temporalConnectHint } from '../../src/worker.js';

describe('temporalConnectHint', () => {
  it('TLS spoken to a plaintext server names TEMPORAL_TLS', () => {
    expect(
      temporalConnectHint(
        'tonic::transport::Error(Transport, ConnectError(Custom { kind: InvalidData, error: InvalidMessage(InvalidContentType) }))',
      ),
    ).toMatch(/^the server answered without TLS: unset TEMPORAL_TLS/);
  });

  it('a refused connection may be transient (a server still starting): no hint', () => {
    expect(
      temporalConnectHint(
        'tonic::transport::Error(Transport, ConnectError(ConnectError("tcp connect error", 127.0.0.1:7299, Os { code: 111, kind: ConnectionRefused, message: "Connection refused" })))',
      ),
    ).toBeUndefined();
  });
});
