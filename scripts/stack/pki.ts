/**
 * Certificates for the stack's kube-apiserver, made with openssl: a CA, the serving certificate, the
 * service-account signing key pair and an admin client certificate (O=system:masters), plus kubeconfigs.
 * Generated once per stack dir and reused, so tokens and kubeconfigs survive restarts.
 */
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { HOST, Ports, stackPaths } from './paths.js';
import { run } from './proc.js';

/** Where each PEM file lives. */
export function pkiFiles(dir = stackPaths().pki) {
  return {
    caCert: join(dir, 'ca.crt'),
    caKey: join(dir, 'ca.key'),
    servingCert: join(dir, 'apiserver.crt'),
    servingKey: join(dir, 'apiserver.key'),
    saKey: join(dir, 'sa.key'),
    saPub: join(dir, 'sa.pub'),
    adminCert: join(dir, 'admin.crt'),
    adminKey: join(dir, 'admin.key'),
  };
}

/** The serving certificate's subject alternative names (loopback plus the in-cluster service names). */
const SERVING_SANS = [
  `IP:${HOST}`,
  'IP:10.0.0.1',
  'DNS:localhost',
  'DNS:kubernetes',
  'DNS:kubernetes.default',
  'DNS:kubernetes.default.svc',
  'DNS:kubernetes.default.svc.cluster.local',
];

const DAYS = '3650';

async function leaf(
  dir: string,
  name: string,
  subject: string,
  ext: { eku: 'serverAuth' | 'clientAuth'; sans?: string[] },
): Promise<void> {
  const f = pkiFiles(dir);
  const key = join(dir, `${name}.key`);
  const csr = join(dir, `${name}.csr`);
  const extFile = join(dir, `${name}.ext`);
  const lines = [
    '[ext]',
    'basicConstraints = critical,CA:FALSE',
    'keyUsage = critical,digitalSignature,keyEncipherment',
    `extendedKeyUsage = ${ext.eku}`,
    'authorityKeyIdentifier = keyid',
  ];
  if (ext.sans) lines.push(`subjectAltName = ${ext.sans.join(',')}`);
  writeFileSync(extFile, `${lines.join('\n')}\n`);
  await run('openssl', ['genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048', '-out', key]);
  await run('openssl', ['req', '-new', '-key', key, '-subj', subject, '-out', csr]);
  await run('openssl', [
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    f.caCert,
    '-CAkey',
    f.caKey,
    '-CAcreateserial',
    '-CAserial',
    join(dir, 'ca.srl'),
    '-days',
    DAYS,
    '-sha256',
    '-extfile',
    extFile,
    '-extensions',
    'ext',
    '-out',
    join(dir, `${name}.crt`),
  ]);
  rmSync(csr, { force: true });
  rmSync(extFile, { force: true });
}

/**
 * Makes every certificate and key the apiserver and the admin need, unless all already exist (a partial
 * set is discarded and made anew). Requires `openssl` on PATH; throws with its stderr on failure.
 */
export async function ensurePki(): Promise<ReturnType<typeof pkiFiles>> {
  const dir = stackPaths().pki;
  const f = pkiFiles(dir);
  if (Object.values(f).every((p) => existsSync(p))) return f;
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const caCnf = join(dir, 'ca.cnf');
  writeFileSync(
    caCnf,
    [
      '[req]',
      'distinguished_name = dn',
      '[dn]',
      '[v3_ca]',
      'basicConstraints = critical,CA:TRUE',
      'keyUsage = critical,keyCertSign,cRLSign,digitalSignature',
      'subjectKeyIdentifier = hash',
      '',
    ].join('\n'),
  );
  await run('openssl', ['genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048', '-out', f.caKey]);
  await run('openssl', [
    'req',
    '-x509',
    '-new',
    '-key',
    f.caKey,
    '-subj',
    '/CN=cocoon-stack-ca',
    '-days',
    DAYS,
    '-sha256',
    '-config',
    caCnf,
    '-extensions',
    'v3_ca',
    '-out',
    f.caCert,
  ]);
  rmSync(caCnf, { force: true });
  await leaf(dir, 'apiserver', '/CN=kube-apiserver', { eku: 'serverAuth', sans: SERVING_SANS });
  await leaf(dir, 'admin', '/O=system:masters/CN=cocoon-stack-admin', { eku: 'clientAuth' });
  await run('openssl', ['genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048', '-out', f.saKey]);
  await run('openssl', ['pkey', '-in', f.saKey, '-pubout', '-out', f.saPub]);
  return f;
}

/** The apiserver's URL on loopback. */
export const apiserverUrl = `https://${HOST}:${Ports.apiserver}`;

const b64 = (file: string) => readFileSync(file).toString('base64');

/**
 * Renders a self-contained kubeconfig (certificate data embedded) for the stack's apiserver. `auth` is a
 * client certificate pair (PEM files) or a bearer token.
 */
export function renderKubeconfig(
  user: string,
  auth: { certFile: string; keyFile: string } | { token: string },
  namespace = 'default',
): string {
  const f = pkiFiles();
  const userEntry =
    'token' in auth
      ? { token: auth.token }
      : { 'client-certificate-data': b64(auth.certFile), 'client-key-data': b64(auth.keyFile) };
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: 'cocoon-stack',
        cluster: { server: apiserverUrl, 'certificate-authority-data': b64(f.caCert) },
      },
    ],
    users: [{ name: user, user: userEntry }],
    contexts: [{ name: user, context: { cluster: 'cocoon-stack', user, namespace } }],
    'current-context': user,
  });
}

/** Writes the admin kubeconfig (system:masters client certificate) into the stack dir; returns its path. */
export function writeAdminKubeconfig(): string {
  const f = pkiFiles();
  const path = stackPaths().adminKubeconfig;
  writeFileSync(
    path,
    renderKubeconfig('cocoon-stack-admin', { certFile: f.adminCert, keyFile: f.adminKey }),
    {
      mode: 0o600,
    },
  );
  return path;
}

/** PEM material for talking to the apiserver as admin from Node (readiness probes). */
export function adminTls(): { ca: string; cert: string; key: string } | undefined {
  const f = pkiFiles();
  if (![f.caCert, f.adminCert, f.adminKey].every((p) => existsSync(p))) return undefined;
  return {
    ca: readFileSync(f.caCert, 'utf8'),
    cert: readFileSync(f.adminCert, 'utf8'),
    key: readFileSync(f.adminKey, 'utf8'),
  };
}
