/**
 * Validation of the pods a pass would build, before the pass deletes or creates anything: the checks of
 * the apiserver's pod validation (k8s.io/kubernetes pkg/apis/core/validation) that a CocoonSet spec can
 * break, with the apiserver's field paths and wording. A spec that fails them must not cost a live VM:
 * drift would delete the running pod and the create of its replacement would then be rejected (422).
 *
 * Why local validation and not a server-side dry run (`dryRun=All`) of the replacement: a dry-run create
 * under the pod's own name answers AlreadyExists while the drifted pod still exists; under another name it
 * counts the old pod against a ResourceQuota (refusing a replacement that fits once the old one is gone)
 * and shows admission webhooks a pod that never exists. Every value the spec feeds into a pod is checked
 * here instead (names, label values, annotation size, quantities, resource names, requests ≤ limits,
 * envFrom, service account); what only admission can reject still fails the create, non-retryably, and is
 * reported on the set.
 *
 * Pure: no I/O, deterministic (safe in workflow code).
 */
import type { V1EnvFromSource, V1Pod, V1ResourceRequirements } from '@kubernetes/client-node';
import type { CocoonSet, VMOptions } from '../api/types.js';
import { buildAgentPod, buildToolboxPod } from './pods.js';
import { compareQuantities, parseQuantity, type Quantity, QuantityParseError } from './quantity.js';
import { agentModeOf, Defaults, replicasOf, toolboxModeOf } from './vmspec.js';

/** DNS-1123 subdomain: at most 253 characters (apimachinery `DNS1123SubdomainMaxLength`). */
const DNS1123_SUBDOMAIN_MAX = 253;
const DNS1123_SUBDOMAIN_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** Label values: at most 63 characters, alphanumeric at both ends (`LabelValueMaxLength`). */
const LABEL_VALUE_MAX = 63;
const LABEL_VALUE_RE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;
/** Qualified-name part of a resource name (`IsQualifiedName`, the name after an optional prefix). */
const QUALIFIED_NAME_RE = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
/** Sum of the lengths of all annotation keys and values (`TotalAnnotationSizeLimitB`, 256 KiB). */
const ANNOTATIONS_MAX_BYTES = 256 * 1024;
/** Resource names valid without a domain prefix (`IsStandardContainerResourceName`). */
const STANDARD_RESOURCES = new Set(['cpu', 'memory', 'ephemeral-storage']);

/** One rejection, as the apiserver words it: `<field>: Invalid value: "<value>": <detail>`. */
export interface PodFieldError {
  field: string;
  value: string;
  detail: string;
  /** The CocoonSet field the value came from, when it is not obvious from `field`. */
  source?: string;
}

/** `<field>: Invalid value: "<value>": <detail>` (field.ErrorList text), plus `(from <source>)`. */
export function formatFieldError(e: PodFieldError): string {
  const base = `${e.field}: Invalid value: ${JSON.stringify(e.value)}: ${e.detail}`;
  return e.source ? `${base} (from ${e.source})` : base;
}

function subdomainErrors(field: string, value: string): PodFieldError[] {
  const out: PodFieldError[] = [];
  if (value.length > DNS1123_SUBDOMAIN_MAX) {
    out.push({ field, value, detail: `must be no more than ${DNS1123_SUBDOMAIN_MAX} characters` });
  }
  if (!DNS1123_SUBDOMAIN_RE.test(value)) {
    out.push({
      field,
      value,
      detail:
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', " +
        'and must start and end with an alphanumeric character',
    });
  }
  return out;
}

function labelValueErrors(field: string, value: string): PodFieldError[] {
  const out: PodFieldError[] = [];
  if (value.length > LABEL_VALUE_MAX) {
    out.push({ field, value, detail: `must be no more than ${LABEL_VALUE_MAX} characters` });
  }
  if (!LABEL_VALUE_RE.test(value)) {
    out.push({
      field,
      value,
      detail:
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', " +
        'and must start and end with an alphanumeric character',
    });
  }
  return out;
}

function resourceNameErrors(field: string, name: string): PodFieldError[] {
  if (STANDARD_RESOURCES.has(name) || name.startsWith('hugepages-')) return [];
  const slash = name.indexOf('/');
  const ok =
    slash > 0 &&
    DNS1123_SUBDOMAIN_RE.test(name.slice(0, slash)) &&
    name.length - slash - 1 <= LABEL_VALUE_MAX &&
    QUALIFIED_NAME_RE.test(name.slice(slash + 1));
  return ok ? [] : [{ field, value: name, detail: 'must be a standard resource type or fully qualified' }];
}

function resourcesErrors(
  path: string,
  r: V1ResourceRequirements | undefined,
  sourcePath: string,
): PodFieldError[] {
  const out: PodFieldError[] = [];
  const parsed: Record<'limits' | 'requests', Map<string, Quantity>> = {
    limits: new Map(),
    requests: new Map(),
  };
  for (const kind of ['limits', 'requests'] as const) {
    for (const [name, raw] of Object.entries(r?.[kind] ?? {})) {
      const field = `${path}.${kind}[${name}]`;
      const source =
        name === 'ephemeral-storage' ? `${sourcePath}.storage` : `${sourcePath}.resources.${kind}`;
      out.push(...resourceNameErrors(field, name));
      let q: Quantity;
      try {
        q = parseQuantity(String(raw));
      } catch (err) {
        out.push({ field, value: String(raw), detail: (err as Error).message, source });
        continue;
      }
      if (q.unscaled < 0n) {
        out.push({ field, value: String(raw), detail: 'must be greater than or equal to 0', source });
        continue;
      }
      parsed[kind].set(name, q);
    }
  }
  for (const [name, req] of parsed.requests) {
    const lim = parsed.limits.get(name);
    if (lim && compareQuantities(req, lim) > 0) {
      out.push({
        // The apiserver names the requests map, not the key (k8s.io/kubernetes v1.34
        // pkg/apis/core/validation `validateResourceRequirements`).
        field: `${path}.requests`,
        value: String(r?.requests?.[name]),
        detail: `must be less than or equal to ${name} limit of ${String(r?.limits?.[name])}`,
        source: name === 'ephemeral-storage' ? `${sourcePath}.storage` : `${sourcePath}.resources`,
      });
    }
  }
  return out;
}

function envFromErrors(path: string, list: V1EnvFromSource[] | undefined): PodFieldError[] {
  const out: PodFieldError[] = [];
  (list ?? []).forEach((e, i) => {
    const at = `${path}[${i}]`;
    if (e.prefix && !/^[\x20-\x7e]+$/.test(e.prefix.replace(/=/g, '\x00'))) {
      out.push({
        field: `${at}.prefix`,
        value: e.prefix,
        detail:
          "a valid environment variable name must consist only of printable ASCII characters other than '='",
      });
    }
    for (const [ref, src] of [
      ['configMapRef', e.configMapRef],
      ['secretRef', e.secretRef],
    ] as const) {
      if (!src) continue;
      const name = src.name ?? '';
      if (name === '') out.push({ field: `${at}.${ref}.name`, value: '', detail: 'Required value' });
      else out.push(...subdomainErrors(`${at}.${ref}.name`, name));
    }
  });
  return out;
}

/**
 * Whether `name` is an extended resource (`IsExtendedResourceName`): fully qualified, outside the
 * `kubernetes.io/` domain and its `requests.` prefix, not a standard or hugepages resource.
 */
function isExtendedResource(name: string): boolean {
  if (STANDARD_RESOURCES.has(name) || name.startsWith('hugepages-') || !name.includes('/')) return false;
  const domain = name.slice(0, name.indexOf('/'));
  return !(domain === 'kubernetes.io' || domain.endsWith('.kubernetes.io')) && !name.startsWith('requests.');
}

/** Whether `raw` parses as a whole-number quantity (a malformed one is reported elsewhere: true). */
function isWholeQuantity(raw: string): boolean {
  let q: Quantity;
  try {
    q = parseQuantity(raw);
  } catch {
    return true;
  }
  return q.exp >= 0 || q.unscaled % 10n ** BigInt(-q.exp) === 0n;
}

/**
 * The rejections `validatePod` added with `validates-more-pod-fields`: an envFrom entry must name exactly
 * one source; a container may not claim a resource claim (a CocoonSet pod declares none); an extended
 * resource is a whole number, needs a limit, and its request equals the limit (k8s.io/kubernetes
 * pkg/apis/core/validation `validateEnvFrom`, `validateResourceClaimNames`, `ValidateResourceRequirements`).
 */
function moreFieldErrors(pod: V1Pod, sourcePath: string): PodFieldError[] {
  const out: PodFieldError[] = [];
  const c = pod.spec?.containers?.[0];
  (c?.envFrom ?? []).forEach((e, i) => {
    const sources = [e.configMapRef, e.secretRef].filter((x) => x != null).length;
    if (sources === 1) return;
    out.push({
      field: `spec.containers[0].envFrom[${i}]`,
      value: '',
      detail:
        sources === 0
          ? 'must specify one of: `configMapRef` or `secretRef`'
          : 'may not have more than one field specified at a time',
      source: `${sourcePath}.envFrom[${i}]`,
    });
  });
  (c?.resources?.claims ?? []).forEach((claim, i) => {
    out.push({
      field: `spec.containers[0].resources.claims[${i}]`,
      value: claim.name ?? '',
      detail: "must name one of the pod's resourceClaims, and a CocoonSet pod has none",
      source: `${sourcePath}.resources.claims`,
    });
  });
  const requests = c?.resources?.requests ?? {};
  const limits = c?.resources?.limits ?? {};
  for (const name of new Set([...Object.keys(requests), ...Object.keys(limits)])) {
    if (!isExtendedResource(name)) continue;
    const source = `${sourcePath}.resources`;
    for (const [kind, m] of [
      ['requests', requests],
      ['limits', limits],
    ] as const) {
      const raw = m[name];
      if (raw === undefined) continue;
      if (!isWholeQuantity(String(raw))) {
        out.push({
          field: `spec.containers[0].resources.${kind}[${name}]`,
          value: String(raw),
          detail: 'must be an integer',
          source,
        });
      }
    }
    const req = requests[name];
    const lim = limits[name];
    if (req !== undefined && lim === undefined) {
      out.push({
        field: `spec.containers[0].resources.limits`,
        value: name,
        detail: 'Limit must be set for non overcommitable resources',
        source,
      });
    } else if (req !== undefined && lim !== undefined && String(req) !== String(lim)) {
      let equal = true;
      try {
        equal = compareQuantities(parseQuantity(String(req)), parseQuantity(String(lim))) === 0;
      } catch {
        // A malformed quantity is reported by resourcesErrors.
      }
      if (!equal) {
        out.push({
          field: `spec.containers[0].resources.requests[${name}]`,
          value: String(req),
          detail: `must be equal to ${name} limit of ${String(lim)}`,
          source,
        });
      }
    }
  }
  return out;
}

/**
 * The apiserver-style rejections of `pod` (one container; as built by src/cocoonset/pods.ts), [] when it
 * would pass validation. `sourcePath` names the CocoonSet field its options came from (`spec.agent`,
 * `spec.toolboxes[i]`) for the messages of resource values. `more`: also `moreFieldErrors` (the
 * `validates-more-pod-fields` patch).
 */
export function validatePod(pod: V1Pod, sourcePath: string, more = false): PodFieldError[] {
  const out: PodFieldError[] = [];
  out.push(...subdomainErrors('metadata.name', pod.metadata?.name ?? ''));
  for (const [k, v] of Object.entries(pod.metadata?.labels ?? {})) {
    out.push(...labelValueErrors(`metadata.labels[${k}]`, v));
  }
  let annotationBytes = 0;
  for (const [k, v] of Object.entries(pod.metadata?.annotations ?? {}))
    annotationBytes += k.length + v.length;
  if (annotationBytes > ANNOTATIONS_MAX_BYTES) {
    out.push({
      field: 'metadata.annotations',
      value: `${annotationBytes} bytes`,
      detail: `may not be more than ${ANNOTATIONS_MAX_BYTES} bytes`,
    });
  }
  for (const [k, v] of Object.entries(pod.spec?.nodeSelector ?? {})) {
    out.push(...labelValueErrors(`spec.nodeSelector[${k}]`, v));
  }
  if (pod.spec?.serviceAccountName) {
    out.push(...subdomainErrors('spec.serviceAccountName', pod.spec.serviceAccountName));
  }
  const c = pod.spec?.containers?.[0];
  out.push(...resourcesErrors('spec.containers[0].resources', c?.resources, sourcePath));
  out.push(...envFromErrors('spec.containers[0].envFrom', c?.envFrom));
  if (more) out.push(...moreFieldErrors(pod, sourcePath));
  return out;
}

/**
 * Most sub-agents a CocoonSet may ask for (ours: the CRD admits any int32 and the reference has no bound). A
 * pass plans every missing sub-agent at once, so `agent.replicas: 2147483647` made it allocate without end
 * until the worker process aborted, on every restart. 1000 is the largest set this operator is tested at
 * (test/workflow/cocoonset-faults.test.ts).
 */
export const MAX_SUB_AGENTS = 1000;

/** Why `spec.agent.replicas` is more than this operator builds (`MAX_SUB_AGENTS`), or undefined. One line. */
export function replicasReason(cs: CocoonSet): string | undefined {
  const replicas = replicasOf(cs);
  if (replicas <= MAX_SUB_AGENTS) return undefined;
  return `spec.agent.replicas: Invalid value: ${replicas}: must be at most ${MAX_SUB_AGENTS} (this operator's bound on sub-agents per CocoonSet)`;
}

/**
 * Why a `static` toolbox cannot come up, or undefined: vk-cocoon adopts the VM its pod's pre-written
 * `vm.cocoonstack.io/id` and `vm.cocoonstack.io/ip` name (`staticVMID`, `staticIP`) and fails the bring-up
 * when either is missing, deleting the pod, which the set recreated at once, in a loop (ours: the CRD
 * admits a static toolbox without them). One line, as `invalidSpecReason`.
 */
export function staticToolboxReason(cs: CocoonSet): string | undefined {
  const i = (cs.spec.toolboxes ?? []).findIndex(
    (tb) => tb.mode === 'static' && (!tb.staticVMID || !tb.staticIP),
  );
  if (i < 0) return undefined;
  return `spec.toolboxes[${i}]: Required value: a static toolbox needs staticVMID and staticIP (vk-cocoon adopts the VM they name)`;
}

/** One path component of an OCI repository name (distribution/reference grammar `path-component`). */
const REPO_COMPONENT = '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*';
/** A registry-relative `repo[:tag]`: no registry port, no digest (grammar `path-component`, `tag`). */
const RELATIVE_REF_RE = new RegExp(
  `^${REPO_COMPONENT}(?:/${REPO_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$`,
);
/** Longest repository name (distribution/reference `NameTotalLengthMax`). */
const REPO_NAME_MAX = 255;

/**
 * `repo` and `tag` (default `latest`) of a clone image `repo[:tag]`: the last `:` not followed by a `/`
 * starts the tag (vk-cocoon's `ociutil.ParseRef` under its registry; the validation gate refuses any shape
 * but a registry-relative one before a pass probes it).
 */
export function cloneImageRef(image: string): { repo: string; tag: string } {
  const colon = image.lastIndexOf(':');
  if (colon < 0 || image.indexOf('/', colon) >= 0) return { repo: image, tag: 'latest' };
  return { repo: image.slice(0, colon), tag: image.slice(colon + 1) };
}

/**
 * Whether `image` is a registry-relative `repo[:tag]` (lowercase path components, an optional tag, no
 * registry port, no digest): what vk-cocoon resolves under its registry for a clone-mode VM, and the rule
 * cocoon-webhook applies to clone-mode images.
 */
export function isRelativeImageRef(image: string): boolean {
  return RELATIVE_REF_RE.test(image) && cloneImageRef(image).repo.length <= REPO_NAME_MAX;
}

/** The VM-spec rule errors of one agent or toolbox (`path`) whose mode, defaulted, is `mode`. */
function vmRuleErrors(path: string, opts: VMOptions, mode: string, image: string): string[] {
  const out: string[] = [];
  if ((opts.backend || Defaults.backend) === 'firecracker') {
    if (opts.os === 'windows') out.push(`${path}: firecracker does not support Windows guests`);
    if (/^https?:\/\//.test(image)) {
      out.push(
        `${path}: firecracker requires an OCI image, cloudimg URLs are not supported (got ${JSON.stringify(image)})`,
      );
    }
    if (mode !== 'run') out.push(`${path}: firecracker does not support ${mode} mode, use mode=run instead`);
  }
  if (mode === 'clone' && image !== '' && !isRelativeImageRef(image)) {
    // cocoon-webhook's wording; ours adds the case rule when the repository part breaks it (an image with
    // an upper-case letter read as if it named a registry port).
    const hint = /[A-Z]/.test(cloneImageRef(image).repo) ? '; repository names are lowercase' : '';
    out.push(
      `${path}.image ${JSON.stringify(image)} must be repo[:tag] when mode is clone (no registry port or digest${hint})`,
    );
  }
  return out;
}

/**
 * Why the agent or a toolbox asks for a VM vk-cocoon cannot bring up, or undefined: cocoon-webhook's
 * CocoonSet rules that the CRD does not already enforce (a clone-mode image that is not a registry-relative
 * `repo[:tag]`; firecracker with a Windows guest, a `http(s)://` image or a mode other than `run`; a
 * non-static toolbox on another backend than the agent), with the webhook's messages
 * joined by `; ` into one line, as `invalidSpecReason`. Enforced here too because the webhook is a separate
 * install: without it such an edit deleted the live main before its replacement failed to come up. Not
 * enforced: the webhook's "a non-static toolbox needs an image" (the reference operator builds such a
 * toolbox, and its own tests do).
 */
export function vmSpecReason(cs: CocoonSet): string | undefined {
  const agent = cs.spec.agent;
  const out = vmRuleErrors('spec.agent', agent, agentModeOf(agent), agent.image ?? '');
  const agentBackend = agent.backend || Defaults.backend;
  (cs.spec.toolboxes ?? []).forEach((tb, i) => {
    if (tb.mode === 'static') return;
    const path = `spec.toolboxes[${i}]`;
    const image = tb.image ?? '';
    const backend = tb.backend || Defaults.backend;
    if (backend !== agentBackend) {
      out.push(
        `${path}.backend ${JSON.stringify(backend)} must match spec.agent.backend ${JSON.stringify(agentBackend)}`,
      );
    }
    out.push(...vmRuleErrors(path, tb, toolboxModeOf(tb), image));
  });
  return out.length > 0 ? out.join('; ') : undefined;
}

/**
 * Why `spec.nodeName` (the main's pin) would make the main be rejected, or undefined: the pin goes into a
 * required hostname affinity, whose values the apiserver checks as label values (at most 63 characters,
 * alphanumeric at both ends, `-_.` inside). One line, as `invalidSpecReason`. The CRD does not check it; a
 * migration to such a pin would otherwise delete the old main before its replacement's create fails (422).
 */
export function nodePinReason(cs: CocoonSet, mainPod: string): string | undefined {
  const pin = cs.spec.nodeName ?? '';
  if (pin === '') return undefined;
  const field =
    'spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]';
  const errs = labelValueErrors(field, pin).map((e) => ({ ...e, source: 'spec.nodeName' }));
  if (errs.length === 0) return undefined;
  return `pod ${mainPod} would be rejected: ${errs.map(formatFieldError).join('; ')}`;
}

/**
 * Why the pods the current spec builds would be rejected, or undefined when they would all pass: one line,
 * `pod <name> would be rejected: <field error>[; <field error>…]` for the first invalid pod. Checks the
 * main, the first and the last sub-agent slot (sub-agents differ only in their slot number, and the last
 * has the longest names) and every toolbox. A builder error (a malformed quantity) is reported the same
 * way, naming the spec field. `mainVM` is the fork-from sub-agents would get. `checkToolboxes` false skips
 * the toolboxes (their names failed the pass's own toolbox-name rules, which report them).
 */
export function invalidSpecReason(
  cs: CocoonSet,
  mainVM: string,
  checkToolboxes = true,
  more = false,
): string | undefined {
  const replicas = replicasOf(cs);
  const candidates: { path: string; opts: VMOptions; build: () => V1Pod }[] = [];
  const agentSlots = [0, ...(replicas >= 1 ? [1] : []), ...(replicas > 1 ? [replicas] : [])];
  for (const slot of agentSlots) {
    candidates.push({
      path: 'spec.agent',
      opts: cs.spec.agent,
      build: () => buildAgentPod(cs, slot, mainVM, ''),
    });
  }
  (checkToolboxes ? (cs.spec.toolboxes ?? []) : []).forEach((tb, i) => {
    candidates.push({ path: `spec.toolboxes[${i}]`, opts: tb, build: () => buildToolboxPod(cs, tb) });
  });
  for (const c of candidates) {
    let pod: V1Pod;
    try {
      pod = c.build();
    } catch (err) {
      const value = err instanceof QuantityParseError ? err.input : String(c.opts.storage ?? '');
      return `${c.path}: Invalid value: ${JSON.stringify(value)}: ${(err as Error).message}`;
    }
    const errs = validatePod(pod, c.path, more);
    if (errs.length > 0) {
      return `pod ${pod.metadata?.name ?? ''} would be rejected: ${errs.map(formatFieldError).join('; ')}`;
    }
  }
  return undefined;
}
