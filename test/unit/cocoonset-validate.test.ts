/**
 * The validation gate of a pass (src/cocoonset/validate.ts): the pods the spec builds are checked as the
 * apiserver's pod validation would check them, and the planner touches no pod while they would be
 * rejected (ours; the reference deletes a drifted pod, then its replacement is rejected with 422).
 */
import { describe, expect, it } from 'vitest';
import { Annotations, Labels } from '../../src/api/keys.js';
import type { CocoonSet } from '../../src/api/types.js';
import type { NamespaceLimits } from '../../src/cocoonset/admission.js';
import {
  NAMESPACE_LIMITS_RECHECK_MS,
  NO_IMAGE_RECHECK_MS,
  NO_NODE_RECHECK_MS,
  REQUEUE_WAIT_FOR_MAIN_MS,
} from '../../src/cocoonset/plan.js';
import { buildAgentPod, buildToolboxPod } from '../../src/cocoonset/pods.js';
import {
  cloneImageRef,
  invalidSpecReason,
  isRelativeImageRef,
  MAX_SUB_AGENTS,
  validatePod,
  vmSpecReason,
} from '../../src/cocoonset/validate.js';
import {
  annotate,
  finalizedSet,
  lifecycleHibernated,
  liveOn,
  newCocoonSet,
  readyPod,
  withFinalizer,
} from '../support/builders.js';
import { done, PlanWorld } from './plan-world.js';

const MAIN_VM = 'vk-ns-demo-0';

describe('invalidSpecReason', () => {
  it('accepts the sets the other tests build (agents, sub-agents, toolboxes, resources, envFrom, storage)', async () => {
    const cs = finalizedSet((c) => {
      c.spec.agent.replicas = 3;
      c.spec.agent.storage = '100Gi';
      c.spec.agent.serviceAccountName = 'agent-sa';
      c.spec.agent.envFrom = [{ configMapRef: { name: 'cfg' }, prefix: 'APP_' }];
      c.spec.agent.resources = { limits: { cpu: '2', memory: '4Gi' }, requests: { cpu: '500m' } };
      c.spec.nodePool = 'pool-a';
      c.spec.snapshotCompatibilityClass = 'cascade-lake-v1';
      c.spec.toolboxes = [
        { name: 'vnc', mode: 'static', staticVMID: 'q', staticIP: '10.0.0.1', vncPort: 5901 },
      ];
    });
    expect(invalidSpecReason(cs, MAIN_VM)).toBeUndefined();
  });

  it('rejects a negative storage with the apiserver field, value and reason, naming the spec field', async () => {
    const reason = invalidSpecReason(
      finalizedSet((c) => {
        c.spec.agent.storage = '-5Gi';
      }),
      MAIN_VM,
    );
    expect(reason).toBe(
      'pod demo-0 would be rejected: ' +
        'spec.containers[0].resources.limits[ephemeral-storage]: Invalid value: "-5Gi": must be greater than or equal to 0 (from spec.agent.storage); ' +
        'spec.containers[0].resources.requests[ephemeral-storage]: Invalid value: "-5Gi": must be greater than or equal to 0 (from spec.agent.storage)',
    );
  });

  it('rejects negative resources, requests above limits and unqualified resource names', async () => {
    const neg = invalidSpecReason(
      finalizedSet((c) => {
        c.spec.agent.resources = { limits: { memory: '-1Gi' } };
      }),
      MAIN_VM,
    );
    expect(neg).toContain(
      'spec.containers[0].resources.limits[memory]: Invalid value: "-1Gi": must be greater than or equal to 0 (from spec.agent.resources.limits)',
    );
    const over = invalidSpecReason(
      finalizedSet((c) => {
        c.spec.agent.resources = { limits: { cpu: '1' }, requests: { cpu: '2' } };
      }),
      MAIN_VM,
    );
    expect(over).toContain(
      'spec.containers[0].resources.requests: Invalid value: "2": must be less than or equal to cpu limit of 1',
    );
    const name = invalidSpecReason(
      finalizedSet((c) => {
        c.spec.agent.resources = { limits: { gpu: '1' } };
      }),
      MAIN_VM,
    );
    expect(name).toContain(
      'limits[gpu]: Invalid value: "gpu": must be a standard resource type or fully qualified',
    );
    expect(
      invalidSpecReason(
        finalizedSet((c) => {
          c.spec.agent.resources = { limits: { 'nvidia.com/gpu': '1', 'hugepages-2Mi': '0' } };
        }),
        MAIN_VM,
      ),
    ).toBeUndefined();
  });

  it('rejects a malformed quantity (which the builder cannot even parse) naming the spec field', async () => {
    expect(
      invalidSpecReason(
        finalizedSet((c) => {
          c.spec.toolboxes = [{ name: 'tb', storage: '1kk' }];
        }),
        MAIN_VM,
      ),
    ).toBe(`spec.toolboxes[0]: Invalid value: "1kk": unable to parse quantity's suffix`);
  });

  it('rejects names and label values past the apiserver limits the CRD does not enforce', async () => {
    // A CocoonSet name of 64 characters is a valid object name but not a label value (63).
    const long = 'a'.repeat(64);
    expect(invalidSpecReason(newCocoonSet(long, withFinalizer), MAIN_VM)).toContain(
      `metadata.labels[cocoonset.cocoonstack.io/name]: Invalid value: "${long}": must be no more than 63 characters`,
    );
    // A toolbox name passes the CRD's pattern at any length; the slot label does not.
    const tb = 't'.repeat(70);
    expect(
      invalidSpecReason(
        finalizedSet((c) => {
          c.spec.toolboxes = [{ name: tb }];
        }),
        MAIN_VM,
      ),
    ).toContain(`metadata.labels[cocoonset.cocoonstack.io/slot]: Invalid value: "${tb}"`);
    // The pool is a free string in the CRD but becomes a node-selector label value.
    expect(
      invalidSpecReason(
        finalizedSet((c) => {
          c.spec.nodePool = 'pool a';
        }),
        MAIN_VM,
      ),
    ).toContain('spec.nodeSelector[cocoonstack.io/pool]: Invalid value: "pool a"');
  });

  it('rejects a pod name past 253 characters (DNS-1123 subdomain)', async () => {
    const pod = buildAgentPod(newCocoonSet('demo'), 1, MAIN_VM, '');
    pod.metadata!.name = `a${'.b'.repeat(127)}`; // 255 characters
    expect(validatePod(pod, 'spec.agent')).toEqual([
      { field: 'metadata.name', value: pod.metadata!.name, detail: 'must be no more than 253 characters' },
    ]);
  });

  it('rejects an envFrom without a name, a bad service account and oversized annotations', async () => {
    expect(
      invalidSpecReason(
        finalizedSet((c) => {
          c.spec.agent.envFrom = [{ secretRef: {} }];
        }),
        MAIN_VM,
      ),
    ).toContain('spec.containers[0].envFrom[0].secretRef.name: Invalid value: "": Required value');
    expect(
      invalidSpecReason(
        finalizedSet((c) => {
          c.spec.agent.serviceAccountName = 'Agent_SA';
        }),
        MAIN_VM,
      ),
    ).toContain('spec.serviceAccountName: Invalid value: "Agent_SA"');
    expect(
      invalidSpecReason(
        finalizedSet((c) => {
          c.spec.agent.image = `registry/${'x'.repeat(300 * 1024)}`;
        }),
        MAIN_VM,
      ),
    ).toContain('metadata.annotations: Invalid value:');
  });
});

describe('the pass with an invalid spec', () => {
  const running = (cs: CocoonSet) => [
    readyPod(buildAgentPod(cs, 0, '', '')),
    readyPod(buildAgentPod(cs, 1, MAIN_VM, '')),
  ];

  it('a storage edit to -5Gi deletes, stamps and creates nothing; the status keeps counting the Ready pods and says why; the fix recovers without a recreate', async () => {
    const good = finalizedSet((c) => {
      c.metadata.generation = 1;
      c.spec.agent.replicas = 1;
      c.spec.agent.storage = '10Gi';
    });
    const w = new PlanWorld(good, running(good));
    expect(done(await w.pass()).result.error).toBeUndefined();
    expect(w.cs.status).toMatchObject({ phase: 'Running', readyAgents: 2 });
    w.log.length = 0;

    w.cs.spec.agent.storage = '-5Gi';
    w.cs.metadata.generation = 2;
    const step = done(await w.pass());
    expect(step.result).toEqual({ requeue: false, requeueAfterMs: 0, error: undefined });
    expect(w.log.map((a) => a.type).sort()).toEqual(['event', 'patchStatus']);
    expect([...w.pods.keys()]).toEqual(['demo-0', 'demo-1']);
    expect(w.cs.status).toMatchObject({
      phase: 'Running',
      readyAgents: 2,
      desiredAgents: 2,
      observedGeneration: 2,
    });
    const progressing = w.cs.status?.conditions?.find((c) => c.type === 'Progressing');
    expect(progressing).toMatchObject({ status: 'False', reason: 'InvalidSpec' });
    expect(progressing?.message).toContain(
      '"-5Gi": must be greater than or equal to 0 (from spec.agent.storage)',
    );
    expect(w.events).toEqual([
      { eventType: 'Warning', reason: 'InvalidSpec', message: progressing?.message },
    ]);

    w.log.length = 0;
    w.cs.spec.agent.storage = '10Gi';
    w.cs.metadata.generation = 3;
    expect(done(await w.pass()).result.error).toBeUndefined();
    expect(w.ids('deletePod')).toEqual([]);
    expect(w.ids('createPod')).toEqual([]);
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'Stable',
      message: 'Running',
    });
    // The stamp of the new generation goes out now that the spec is valid again.
    expect(w.pod('demo-0')!.metadata?.annotations?.[Annotations.cocoonSetGeneration]).toBe('3');
  });

  it(`agent.replicas above ${MAX_SUB_AGENTS} (the CRD admits any int32): InvalidSpec, no pod touched, none planned (ours: 2147483647 made the pass allocate until the worker process aborted, on every restart; new-user finding)`, async () => {
    const good = finalizedSet((c) => {
      c.metadata.generation = 1;
      c.spec.agent.replicas = 1;
    });
    const w = new PlanWorld(good, running(good));
    expect(done(await w.pass()).result.error).toBeUndefined();
    w.log.length = 0;

    w.cs.spec.agent.replicas = MAX_SUB_AGENTS + 1;
    w.cs.metadata.generation = 2;
    const step = done(await w.pass());
    expect(step.result).toEqual({ requeue: false, requeueAfterMs: 0, error: undefined });
    expect(w.log.map((a) => a.type).sort()).toEqual(['event', 'patchStatus']);
    const progressing = w.cs.status?.conditions?.find((c) => c.type === 'Progressing');
    expect(progressing).toMatchObject({ status: 'False', reason: 'InvalidSpec' });
    expect(progressing?.message).toBe(
      `invalid spec, no pod changed: spec.agent.replicas: Invalid value: ${MAX_SUB_AGENTS + 1}: must be at most ${MAX_SUB_AGENTS} (this operator's bound on sub-agents per CocoonSet)`,
    );
    expect(w.cs.status).toMatchObject({ phase: 'Scaling', readyAgents: 2, observedGeneration: 2 });

    // The bound itself builds (a run recorded before the patch plans every slot: 1001 creates here).
    w.log.length = 0;
    w.cs.spec.agent.replicas = MAX_SUB_AGENTS;
    w.cs.metadata.generation = 3;
    expect(done(await w.pass()).result.error).toBeUndefined();
    expect(w.ids('createPod')).toHaveLength(MAX_SUB_AGENTS - 1);
  });

  it('a static toolbox without staticVMID or staticIP (vk-cocoon deletes its pod, which was recreated in a loop): InvalidSpec naming the toolbox, no pod touched; not for runs recorded before the patch', async () => {
    const cs = finalizedSet((c) => {
      c.spec.toolboxes = [{ name: 'desk', mode: 'static', staticVMID: 'vm-desk' }];
    });
    const w = new PlanWorld(cs, running(cs).slice(0, 1));
    const step = done(await w.pass());
    expect(step.result.error).toBeUndefined();
    expect(w.ids('createPod')).toEqual([]);
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.message).toBe(
      'invalid spec, no pod changed: spec.toolboxes[0]: Required value: a static toolbox needs staticVMID and staticIP (vk-cocoon adopts the VM they name)',
    );
    const old = new PlanWorld(cs, running(cs).slice(0, 1));
    done(await old.pass({ validatesStaticToolboxes: false }));
    expect(old.ids('createPod')).toEqual(['create:demo-desk']);
  });

  it('an agent image edit to a clone ref vk-cocoon cannot resolve (registry port): InvalidSpec with the webhook message, the live main and sub-agent kept; a run recorded before the patch deleted the main first', async () => {
    const good = finalizedSet((c) => {
      c.metadata.generation = 1;
      c.spec.agent.replicas = 1;
    });
    const bad = (c: CocoonSet) => {
      c.spec.agent.image = 'localhost:5000/ubuntu:24.04';
      c.metadata.generation = 2;
    };
    const w = new PlanWorld(good, running(good));
    expect(done(await w.pass()).result.error).toBeUndefined();
    w.log.length = 0;
    bad(w.cs);
    expect(done(await w.pass()).result.error).toBeUndefined();
    expect(w.log.map((a) => a.type).sort()).toEqual(['event', 'patchStatus']);
    expect([...w.pods.keys()]).toEqual(['demo-0', 'demo-1']);
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'InvalidSpec',
      message:
        'invalid spec, no pod changed: spec.agent.image "localhost:5000/ubuntu:24.04" must be repo[:tag] when mode is clone (no registry port or digest)',
    });

    const old = new PlanWorld(good, running(good));
    done(await old.pass());
    bad(old.cs);
    done(await old.pass({ validatesVMRules: false }));
    expect(old.ids('deletePod')).toContain('delete:demo-0');
  });

  it('without the patch (a run recorded before it) replicas above the bound are planned as before', async () => {
    const cs = finalizedSet((c) => {
      c.spec.agent.replicas = MAX_SUB_AGENTS + 1;
    });
    const w = new PlanWorld(cs, running(cs));
    expect(done(await w.pass({ capsSubAgents: false })).result.error).toBeUndefined();
    expect(w.ids('createPod')).toHaveLength(MAX_SUB_AGENTS);
  });

  it('a failed pass writes the roll-up it saw (the Ready main counts) with Progressing=False ReconcileFailed, then ends with the error', async () => {
    const cs = finalizedSet((c) => {
      c.spec.agent.replicas = 1;
    });
    const w = new PlanWorld(cs, [readyPod(buildAgentPod(cs, 0, '', ''))]);
    w.failures.set('create:demo-1', 'Pod "demo-1" is forbidden: exceeded quota (Forbidden, HTTP 403)');
    const step = done(await w.pass());
    expect(step.result.error).toBe(
      'create sub-agent slot 1: Pod "demo-1" is forbidden: exceeded quota (Forbidden, HTTP 403)',
    );
    expect(w.cs.status).toMatchObject({ phase: 'Scaling', readyAgents: 1, desiredAgents: 2 });
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'ReconcileFailed',
      message: step.result.error,
    });
  });
});

describe('isRelativeImageRef (what vk-cocoon resolves under its registry for a clone-mode VM)', () => {
  it.each([
    'img',
    'cocoonstack/ubuntu-dev:24.04',
    'ghcr.io/cocoonstack/placeholder:latest',
    'a__b/c--d.e_f:Tag_1.2-3',
    `${'a'.repeat(255)}:1`,
  ])('accepts %s', (image) => {
    expect(isRelativeImageRef(image)).toBe(true);
  });

  it.each([
    ['a registry port', 'localhost:5000/ubuntu:24.04'],
    ['a digest', `ubuntu@sha256:${'0'.repeat(64)}`],
    ['upper case in the repository', 'Ubuntu:24.04'],
    ['an empty tag', 'ubuntu:'],
    ['a space', 'ubuntu 24.04'],
    ['a leading separator', '-ubuntu'],
    ['an empty path component', 'cocoonstack//ubuntu'],
    ['a tag past 128 characters', `ubuntu:${'t'.repeat(129)}`],
    ['a repository past 255 characters', `${'a'.repeat(256)}:1`],
    ['a URL', 'https://example.com/ubuntu.qcow2'],
  ])('rejects %s', (_what, image) => {
    expect(isRelativeImageRef(image)).toBe(false);
  });
});

describe('vmSpecReason (cocoon-webhook CocoonSet rules the CRD does not enforce)', () => {
  it('accepts the sample spec: clone agent, run and static toolboxes on the default backend', () => {
    const cs = finalizedSet((c) => {
      c.spec.agent.image = 'cocoonstack/ubuntu-dev:24.04';
      c.spec.toolboxes = [
        { name: 'browser', image: 'cocoonstack/chromium:stable' },
        { name: 'desk', mode: 'static', staticVMID: 'q', staticIP: '10.0.0.1' },
        { name: 'cloud', mode: 'run', image: 'https://example.com/ubuntu.qcow2' },
      ];
    });
    expect(vmSpecReason(cs)).toBeUndefined();
  });

  it('a run-mode agent may name any image (a cloudimg URL, a registry with a port)', () => {
    for (const image of ['https://example.com/ubuntu.qcow2', 'localhost:5000/ubuntu:24.04']) {
      const cs = finalizedSet((c) => {
        c.spec.agent.mode = 'run';
        c.spec.agent.image = image;
      });
      expect(vmSpecReason(cs)).toBeUndefined();
    }
  });

  it('firecracker: no Windows guest, no cloudimg URL, run mode only (the agent defaults to clone); every error joined', () => {
    const cs = finalizedSet((c) => {
      c.spec.agent.backend = 'firecracker';
      c.spec.agent.os = 'windows';
      c.spec.agent.image = 'https://example.com/win.qcow2';
    });
    expect(vmSpecReason(cs)).toBe(
      [
        'spec.agent: firecracker does not support Windows guests',
        'spec.agent: firecracker requires an OCI image, cloudimg URLs are not supported (got "https://example.com/win.qcow2")',
        'spec.agent: firecracker does not support clone mode, use mode=run instead',
        'spec.agent.image "https://example.com/win.qcow2" must be repo[:tag] when mode is clone (no registry port or digest)',
      ].join('; '),
    );
    const ok = finalizedSet((c) => {
      c.spec.agent.backend = 'firecracker';
      c.spec.agent.mode = 'run';
      c.spec.agent.image = 'cocoonstack/ubuntu:24.04';
      c.spec.toolboxes = [{ name: 'tb', backend: 'firecracker', image: 'cocoonstack/tb:1' }];
    });
    expect(vmSpecReason(ok)).toBeUndefined();
  });

  it("a non-static toolbox needs the agent's backend, a static one does not; an imageless toolbox passes (deliberate: the webhook refuses it, the reference operator builds it)", () => {
    const cs = finalizedSet((c) => {
      c.spec.toolboxes = [
        { name: 'desk', mode: 'static', staticVMID: 'q', staticIP: '10.0.0.1', backend: 'firecracker' },
        { name: 'bare' },
        { name: 'fc', image: 'tb:1', backend: 'firecracker' },
        { name: 'cl', mode: 'clone', image: 'tb@sha256:abc' },
      ];
    });
    expect(vmSpecReason(cs)).toBe(
      [
        'spec.toolboxes[2].backend "firecracker" must match spec.agent.backend "cloud-hypervisor"',
        'spec.toolboxes[3].image "tb@sha256:abc" must be repo[:tag] when mode is clone (no registry port or digest)',
      ].join('; '),
    );
  });

  it('a clone image with an upper-case repository says repository names are lowercase (the webhook wording alone blames a registry port); an upper-case tag is valid', () => {
    const withImage = (image: string) =>
      finalizedSet((c) => {
        c.spec.agent.image = image;
      });
    expect(vmSpecReason(withImage('cocoonstack/Ubuntu:24.04'))).toBe(
      'spec.agent.image "cocoonstack/Ubuntu:24.04" must be repo[:tag] when mode is clone (no registry port or digest; repository names are lowercase)',
    );
    expect(vmSpecReason(withImage('localhost:5000/ubuntu:24.04'))).toBe(
      'spec.agent.image "localhost:5000/ubuntu:24.04" must be repo[:tag] when mode is clone (no registry port or digest)',
    );
    expect(vmSpecReason(withImage('cocoonstack/ubuntu:Noble-24.04'))).toBeUndefined();
  });
});

/** A Running set of a main and one sub-agent, both live on node-a; then `edit` at generation 2. */
function editedRunningSet(edit: (c: CocoonSet) => void): PlanWorld {
  const good = finalizedSet((c) => {
    c.metadata.generation = 1;
    c.spec.agent.replicas = 1;
  });
  const pods = [
    liveOn(readyPod(buildAgentPod(good, 0, '', '')), 'node-a', 'vm-0'),
    liveOn(readyPod(buildAgentPod(good, 1, MAIN_VM, 'node-a')), 'node-a', 'vm-1'),
  ];
  const cs = finalizedSet((c) => {
    c.metadata.generation = 2;
    c.spec.agent.replicas = 1;
    edit(c);
  });
  return new PlanWorld(cs, pods);
}

describe('the placement gate (ours: no live main is replaced by one no node can take)', () => {
  const NODES = [
    { [Labels.nodePool]: 'default', [Labels.hostname]: 'node-a' },
    { [Labels.nodePool]: 'gpu', [Labels.hostname]: 'node-g' },
  ];
  /** `editedRunningSet(edit)` in a cluster of `opts.nodes` (default NODES). */
  const edited = (edit: (c: CocoonSet) => void, opts: { nodes?: Record<string, string>[] } = {}) => {
    const w = editedRunningSet(edit);
    w.nodes = 'nodes' in opts ? opts.nodes : NODES;
    return w;
  };
  const anyNodeQueries = (w: PlanWorld) =>
    w.log.flatMap((a) => (a.type === 'anyNode' ? [a.labelSelector] : []));

  it('a nodePool edit to a pool no node has: NoMatchingNode naming the labels, the main and sub-agent kept, a look again in 30 s; without the patch the main was deleted first', async () => {
    const w = edited((c) => {
      c.spec.nodePool = 'nowhere';
    });
    const step = done(await w.pass());
    expect(step.result).toEqual({ requeue: false, requeueAfterMs: NO_NODE_RECHECK_MS, error: undefined });
    expect(anyNodeQueries(w)).toEqual([`${Labels.nodePool}=nowhere`]);
    expect(w.log.map((a) => a.type).sort()).toEqual(['anyNode', 'event', 'patchStatus']);
    const message = `no node has the labels the spec gives the main (${Labels.nodePool}=nowhere): main pod ns/demo-0 is kept and no pod changed; add such a node or change the spec`;
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'NoMatchingNode',
      message,
    });
    expect(w.cs.status).toMatchObject({ phase: 'Running', readyAgents: 2 });
    expect(w.events).toEqual([{ eventType: 'Warning', reason: 'NoMatchingNode', message }]);

    const old = edited((c) => {
      c.spec.nodePool = 'nowhere';
    });
    done(await old.pass({ waitsForANode: false }));
    expect(old.ids('deletePod')).toContain('delete:demo-0');
  });

  it('a pool some node has: the drift goes on as before (the main deleted for its re-create)', async () => {
    const w = edited((c) => {
      c.spec.nodePool = 'gpu';
    });
    expect(done(await w.pass()).result.requeue).toBe(true);
    expect(anyNodeQueries(w)).toEqual([`${Labels.nodePool}=gpu`]);
    expect(w.ids('deletePod')).toEqual(['delete:demo-0']);
  });

  it('a pin to a node that does not exist: no migration starts (no Migrating, no hibernate ask), NoMatchingNode; a pin to a node of another pool likewise', async () => {
    for (const pin of ['ghost', 'node-g']) {
      const w = edited((c) => {
        c.spec.nodeName = pin;
      });
      expect(done(await w.pass()).result.requeueAfterMs).toBe(NO_NODE_RECHECK_MS);
      expect(anyNodeQueries(w)).toEqual([`${Labels.nodePool}=default,${Labels.hostname}=${pin}`]);
      expect(w.asks).toEqual([]);
      expect(w.cs.status?.phase).toBe('Running');
      expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).toBe('NoMatchingNode');
    }
  });

  it('no Node List while the placement is unchanged: a steady pass, a pin naming the node the main runs on, a spec edit that keeps the pool', async () => {
    for (const edit of [
      () => {},
      (c: CocoonSet) => {
        c.spec.nodeName = 'node-a';
      },
      (c: CocoonSet) => {
        c.spec.agent.storage = '20Gi';
      },
    ]) {
      const w = edited(edit);
      done(await w.pass());
      expect(anyNodeQueries(w)).toEqual([]);
    }
  });

  it('a CPU class added to a set whose main has none: the main is adopted (drift keeps it), so nothing is listed or held (helper-39: the immutable class held the whole set for ever)', async () => {
    const w = edited((c) => {
      c.spec.snapshotCompatibilityClass = 'cx';
    });
    done(await w.pass());
    expect(anyNodeQueries(w)).toEqual([]);
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).not.toBe('NoMatchingNode');
  });

  it('a retain set un-suspended after its pool was moved to one no node has: the hibernated main and its tag are kept, Suspended with NoMatchingNode (helper-39: the main was deleted, its tag dropped, and a fresh pod waited Pending)', async () => {
    const good = finalizedSet((c) => {
      c.metadata.generation = 1;
    });
    const main = liveOn(readyPod(buildAgentPod(good, 0, '', '')), 'node-a', 'vm-0');
    main.metadata!.annotations![Annotations.hibernate] = 'true';
    main.metadata!.annotations![Annotations.lifecycleState] = 'hibernated';
    const cs = finalizedSet((c) => {
      c.metadata.generation = 3;
      c.spec.nodePool = 'nowhere';
      c.status = { phase: 'Suspended' } as CocoonSet['status'];
    });
    const w = new PlanWorld(cs, [main]);
    w.nodes = NODES;
    w.tags.add(`${MAIN_VM}:hibernate`);
    const step = done(await w.pass());
    expect(step.result.requeueAfterMs).toBe(NO_NODE_RECHECK_MS);
    expect([w.ids('deletePod'), w.droppedTags, w.asks]).toEqual([[], [], []]);
    expect(w.cs.status?.phase).toBe('Suspended');
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).toBe('NoMatchingNode');
  });

  it('a Node List that fails (a role without nodes) lets the drift go on, as the reference; no main (a fresh set) asks nothing', async () => {
    const w = edited((c) => {
      c.spec.nodePool = 'nowhere';
    });
    w.nodeListError = 'nodes is forbidden (Forbidden, HTTP 403)';
    done(await w.pass());
    expect(w.ids('deletePod')).toContain('delete:demo-0');

    const fresh = new PlanWorld(
      finalizedSet((c) => {
        c.spec.nodePool = 'nowhere';
      }),
    );
    fresh.nodes = [];
    done(await fresh.pass());
    expect(anyNodeQueries(fresh)).toEqual([]);
    expect(fresh.ids('createPod')).toEqual(['create:demo-0']);
  });
});

describe('invalidSpecReason with the validates-more-pod-fields checks (new-user finding: each of these deleted the live main before its replacement was rejected)', () => {
  const reason = (mod: (c: CocoonSet) => void) => invalidSpecReason(finalizedSet(mod), MAIN_VM, true, true);

  it('accepts what the apiserver accepts: one envFrom source each, whole extended resources with request = limit', () => {
    expect(
      reason((c) => {
        c.spec.agent.envFrom = [{ configMapRef: { name: 'a' } }, { secretRef: { name: 'b' }, prefix: 'S_' }];
        c.spec.agent.resources = {
          requests: { 'example.com/gpu': '2', cpu: '500m' },
          limits: { 'example.com/gpu': '2', 'kubernetes.io/whatever': '1.5' },
        };
      }),
    ).toBeUndefined();
  });

  it('an envFrom entry with no source, or two', () => {
    expect(
      reason((c) => {
        c.spec.agent.envFrom = [{ prefix: 'APP_' }];
      }),
    ).toBe(
      'pod demo-0 would be rejected: spec.containers[0].envFrom[0]: Invalid value: "": must specify one of: `configMapRef` or `secretRef` (from spec.agent.envFrom[0])',
    );
    expect(
      reason((c) => {
        c.spec.agent.envFrom = [{ configMapRef: { name: 'a' }, secretRef: { name: 'b' } }];
      }),
    ).toContain('envFrom[0]: Invalid value: "": may not have more than one field specified at a time');
  });

  it('a resource claim (a CocoonSet pod declares no resourceClaims)', () => {
    expect(
      reason((c) => {
        c.spec.agent.resources = { claims: [{ name: 'gpu' }] };
      }),
    ).toBe(
      `pod demo-0 would be rejected: spec.containers[0].resources.claims[0]: Invalid value: "gpu": must name one of the pod's resourceClaims, and a CocoonSet pod has none (from spec.agent.resources.claims)`,
    );
  });

  it('an extended resource whose request differs from its limit, has no limit, or is fractional', () => {
    expect(
      reason((c) => {
        c.spec.agent.resources = { requests: { 'example.com/gpu': '1' }, limits: { 'example.com/gpu': '2' } };
      }),
    ).toContain(
      'spec.containers[0].resources.requests[example.com/gpu]: Invalid value: "1": must be equal to example.com/gpu limit of 2',
    );
    expect(
      reason((c) => {
        c.spec.agent.resources = { requests: { 'example.com/gpu': '1' } };
      }),
    ).toContain(
      'spec.containers[0].resources.limits: Invalid value: "example.com/gpu": Limit must be set for non overcommitable resources',
    );
    expect(
      reason((c) => {
        c.spec.agent.resources = { limits: { 'example.com/gpu': '500m' } };
      }),
    ).toContain('resources.limits[example.com/gpu]: Invalid value: "500m": must be an integer');
  });

  it('a pass keeps the live main on such an edit; a run recorded before the patch deleted it first', async () => {
    const good = finalizedSet((c) => {
      c.metadata.generation = 1;
      c.spec.agent.replicas = 1;
    });
    const pods = [readyPod(buildAgentPod(good, 0, '', '')), readyPod(buildAgentPod(good, 1, MAIN_VM, ''))];
    const bad = finalizedSet((c) => {
      c.metadata.generation = 2;
      c.spec.agent.replicas = 1;
      c.spec.agent.envFrom = [{ prefix: 'APP_' }];
    });
    const w = new PlanWorld(bad, pods);
    done(await w.pass());
    expect(w.ids('deletePod')).toEqual([]);
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).toBe('InvalidSpec');
    const old = new PlanWorld(bad, pods);
    done(await old.pass({ validatesMorePodFields: false }));
    expect(old.ids('deletePod')).toContain('delete:demo-0');
  });
});

describe('the clone-image gate (ours: no live main is replaced by one whose clone image the registry lacks)', () => {
  /** `editedRunningSet(edit)` with a registry that holds no clone image. */
  const edited = (edit: (c: CocoonSet) => void) => {
    const w = editedRunningSet(edit);
    w.images = new Set();
    return w;
  };
  const toTypo = (c: CocoonSet) => {
    c.spec.agent.image = 'cocoon/agent:v2-typo';
  };

  it('an image edit to a tag the registry lacks: ImageNotFound naming it, the main and sub-agent kept, a probe again in 30 s; once pushed the drift goes on; without the patch the main was deleted first', async () => {
    const w = edited(toTypo);
    const step = done(await w.pass());
    expect(step.result).toEqual({ requeue: false, requeueAfterMs: NO_IMAGE_RECHECK_MS, error: undefined });
    expect(w.probes).toEqual(['cocoon/agent:v2-typo']);
    expect(w.log.map((a) => a.type).sort()).toEqual(['event', 'patchStatus', 'probeImage']);
    expect(w.ids('deletePod')).toEqual([]);
    const message =
      'clone image cocoon/agent:v2-typo is not in the registry: main pod ns/demo-0 is kept and no pod changed; push the image or change spec.agent.image';
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'ImageNotFound',
      message,
    });
    expect(w.cs.status).toMatchObject({ phase: 'Running', readyAgents: 2 });
    expect(w.events).toEqual([{ eventType: 'Warning', reason: 'ImageNotFound', message }]);

    w.images!.add('cocoon/agent:v2-typo');
    expect(done(await w.pass()).result.requeue).toBe(true);
    expect(w.ids('deletePod')).toEqual(['delete:demo-0']);

    const old = edited(toTypo);
    done(await old.pass({ driftWaitsForCloneImage: false }));
    expect([old.probes, old.ids('deletePod')]).toEqual([[], ['delete:demo-0']]);
  });

  it('probes only a new clone image of a main a node took: not for another drift (same image), run mode, a main no node took or a failed one, or without a registry', async () => {
    const noProbe = async (w: PlanWorld, what: string, opts: { registryConfigured?: boolean } = {}) => {
      done(await w.pass(opts));
      expect([w.probes, w.ids('deletePod')], what).toEqual([[], ['delete:demo-0']]);
    };
    await noProbe(
      edited((c) => {
        c.spec.agent.resources = { limits: { cpu: '3' } };
      }),
      'same image',
    );
    await noProbe(
      edited((c) => {
        toTypo(c);
        c.spec.agent.mode = 'run';
      }),
      'run mode',
    );
    await noProbe(edited(toTypo), 'no registry', { registryConfigured: false });
    const unbound = edited(toTypo);
    delete unbound.pod('demo-0')!.metadata!.annotations![Annotations.vmID];
    delete unbound.pod('demo-0')!.spec!.nodeName;
    await noProbe(unbound, 'no node took it');
    const failed = edited(toTypo);
    failed.pod('demo-0')!.metadata!.annotations![Annotations.lifecycleState] = 'failed';
    await noProbe(failed, 'failed main');
  });

  it('a live clone-mode toolbox likewise: its image edit to a tag the registry lacks keeps it (and names it), together with the main when both change; an image the registry has goes on; a run-mode toolbox is not probed', async () => {
    const tb = { name: 'tools', mode: 'clone' as const, image: 'cocoon/tools:v1' };
    const before = finalizedSet((c) => {
      c.metadata.generation = 1;
      c.spec.toolboxes = [tb];
    });
    const world = (edit: (c: CocoonSet) => void, images: string[] = []) => {
      const cs = finalizedSet((c) => {
        c.metadata.generation = 2;
        c.spec.toolboxes = [{ ...tb }];
        edit(c);
      });
      const w = new PlanWorld(cs, [
        liveOn(readyPod(buildAgentPod(before, 0, '', '')), 'node-a', 'vm-0'),
        liveOn(readyPod(buildToolboxPod(before, tb)), 'node-a', 'vm-tb'),
      ]);
      w.images = new Set(images);
      return w;
    };
    const w = world((c) => {
      c.spec.toolboxes![0]!.image = 'cocoon/tools:v2-typo';
      toTypo(c);
    });
    expect(done(await w.pass()).result.requeueAfterMs).toBe(NO_IMAGE_RECHECK_MS);
    expect(w.probes.sort()).toEqual(['cocoon/agent:v2-typo', 'cocoon/tools:v2-typo']);
    expect(w.ids('deletePod')).toEqual([]);
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.message).toBe(
      'clone image cocoon/agent:v2-typo is not in the registry: main pod ns/demo-0 is kept; clone image cocoon/tools:v2-typo is not in the registry: toolbox pod ns/demo-tools is kept and no pod changed; push the image or change spec.agent.image, spec.toolboxes[0].image',
    );
    const pushed = world((c) => (c.spec.toolboxes![0]!.image = 'cocoon/tools:v2'), ['cocoon/tools:v2']);
    done(await pushed.pass());
    expect([pushed.probes, pushed.ids('deletePod')]).toEqual([['cocoon/tools:v2'], ['delete:demo-tools']]);
    const run = world((c) => {
      c.spec.toolboxes![0]!.mode = 'run';
      c.spec.toolboxes![0]!.image = 'cocoon/tools:v2-typo';
    });
    done(await run.pass());
    expect([run.probes, run.ids('deletePod')]).toEqual([[], ['delete:demo-tools']]);
  });

  it('a retain set un-suspended together with an image edit to a tag the registry lacks: held before any VM is woken (its hibernated main is kept, with its :hibernate tag); while suspended nothing is probed (found by a new-user run: the main was woken, deleted, its tag dropped, and the replacement never came up)', async () => {
    const good = finalizedSet((c) => {
      c.metadata.generation = 1;
      c.spec.suspend = true;
    });
    const hibernated = lifecycleHibernated(
      annotate(liveOn(readyPod(buildAgentPod(good, 0, '', '')), 'node-a', 'vm-0'), {
        [Annotations.hibernate]: 'true',
        [Annotations.cocoonSetGeneration]: '1',
      }),
    );
    delete hibernated.metadata!.annotations![Annotations.vmID];
    const cs = finalizedSet((c) => {
      c.metadata.generation = 2;
      c.status = { phase: 'Suspended' } as CocoonSet['status'];
      toTypo(c);
    });
    const w = new PlanWorld(cs, [hibernated]);
    w.images = new Set();
    w.tags.add('vk-ns-demo-0:hibernate');
    expect(done(await w.pass()).result.requeueAfterMs).toBe(NO_IMAGE_RECHECK_MS);
    expect([w.probes, w.asks, w.ids('deletePod'), w.cs.status?.phase]).toEqual([
      ['cocoon/agent:v2-typo'],
      [],
      [],
      'Suspended',
    ]);
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).toBe('ImageNotFound');
    // Still suspended (the edit made while suspended): the suspend goes on, no probe.
    const still = new PlanWorld(
      finalizedSet((c) => {
        c.metadata.generation = 2;
        c.spec.suspend = true;
        toTypo(c);
      }),
      [hibernated],
    );
    still.images = new Set();
    done(await still.pass());
    expect(still.probes.filter((p) => p.includes('agent'))).toEqual([]);
  });

  it('a registry error fails the pass (ReconcileFailed, retried) and touches no pod: the new image is not known to exist', async () => {
    const w = edited(toTypo);
    w.probeError = 'registry down';
    const step = done(await w.pass());
    expect(step.result.error).toBe('probe clone image cocoon/agent:v2-typo: registry down');
    expect(w.ids('deletePod')).toEqual([]);
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).toBe('ReconcileFailed');
  });

  it('cloneImageRef: repo[:tag], tag latest by default (vk-cocoon ociutil.ParseRef)', () => {
    expect(cloneImageRef('agent')).toEqual({ repo: 'agent', tag: 'latest' });
    expect(cloneImageRef('cocoon/agent')).toEqual({ repo: 'cocoon/agent', tag: 'latest' });
    expect(cloneImageRef('cocoon/agent:v2')).toEqual({ repo: 'cocoon/agent', tag: 'v2' });
    expect(cloneImageRef('ghcr.io/cocoonstack/cocoon/ubuntu:24.04')).toEqual({
      repo: 'ghcr.io/cocoonstack/cocoon/ubuntu',
      tag: '24.04',
    });
  });
});

describe('the namespace-limits gate (ours: no live pod is replaced by one the namespace would not admit)', () => {
  const toFourGi = (c: CocoonSet) => {
    c.spec.agent.resources = { limits: { memory: '4Gi' } };
  };
  const quota = (hard: string): NamespaceLimits => ({
    limitRanges: [],
    quotas: [{ name: 'mem', hard: { 'limits.memory': hard }, used: { 'limits.memory': '0' } }],
  });

  it('a resources edit past the quota: ExceedsNamespaceLimits quoting the apiserver, main and sub-agent kept, a look again in 30 s; once the quota is raised the drift goes on; without the patch the main was deleted first', async () => {
    const w = editedRunningSet(toFourGi);
    w.limits = quota('3Gi');
    const step = done(await w.pass());
    expect(step.result).toEqual({
      requeue: false,
      requeueAfterMs: NAMESPACE_LIMITS_RECHECK_MS,
      error: undefined,
    });
    expect(w.limitReads).toBe(1);
    expect(w.ids('deletePod')).toEqual([]);
    // Both drifted pods' replacements count against the quota (4Gi each); the live ones named no memory.
    const message =
      'the namespace would not admit a pod the spec needs: pods "demo-0" is forbidden: exceeded quota: mem, requested: limits.memory=8Gi, used: limits.memory=0, limited: limits.memory=3Gi; the live pods (ns/demo-0, ns/demo-1) are kept and no pod changed; change the spec\'s resources or storage, or the namespace\'s LimitRange or ResourceQuota';
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'ExceedsNamespaceLimits',
      message,
    });
    expect(w.cs.status).toMatchObject({ phase: 'Running', readyAgents: 2 });
    expect(w.events).toEqual([{ eventType: 'Warning', reason: 'ExceedsNamespaceLimits', message }]);

    w.limits = quota('8Gi');
    expect(done(await w.pass()).result.requeue).toBe(true);
    expect(w.ids('deletePod')).toEqual(['delete:demo-0']);

    const old = editedRunningSet(toFourGi);
    old.limits = quota('3Gi');
    done(await old.pass({ driftChecksNamespaceLimits: false }));
    expect([old.limitReads, old.ids('deletePod')]).toEqual([0, ['delete:demo-0']]);
  });

  it('the pods the spec adds beside the replacements count too: a resize with a scale-up past the quota keeps every live pod (found by a new-user run: a new slot took the quota and a replaced sub-agent was refused)', async () => {
    const edit = (c: CocoonSet) => {
      c.spec.agent.resources = { limits: { memory: '2Gi' } };
      c.spec.agent.replicas = 2;
    };
    const w = editedRunningSet(edit);
    w.limits = quota('5Gi'); // the two replacements (4Gi) fit, with the new slot (6Gi) they do not
    done(await w.pass());
    expect([w.ids('deletePod'), w.ids('createPod')]).toEqual([[], []]);
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.message).toContain(
      'exceeded quota: mem, requested: limits.memory=6Gi, used: limits.memory=0, limited: limits.memory=5Gi',
    );
    const fits = editedRunningSet(edit);
    fits.limits = quota('6Gi');
    done(await fits.pass());
    expect(fits.ids('deletePod')).toEqual(['delete:demo-0']);
  });

  it('a resize together with a scale-down that fits only once the extra pod is gone: held whole (the extra pod goes after the main is back), and the message says to scale down first', async () => {
    const w = editedRunningSet((c) => {
      c.spec.agent.resources = { limits: { memory: '2Gi' } };
      c.spec.agent.replicas = 0;
    });
    w.limits = {
      limitRanges: [],
      quotas: [{ name: 'mem', hard: { 'limits.memory': '2Gi' }, used: { 'limits.memory': '2Gi' } }],
    };
    done(await w.pass());
    expect(w.ids('deletePod')).toEqual([]);
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.message).toMatch(
      /exceeded quota: mem, .*ResourceQuota \(the pods the spec drops still count until the main is back: drop them in an edit of their own first\)$/,
    );
  });

  it("a LimitRange maximum the edit passes: refused with the LimitRanger's words", async () => {
    const w = editedRunningSet(toFourGi);
    w.limits = {
      limitRanges: [{ name: 'max', limits: [{ type: 'Container', max: { memory: '2Gi' } }] }],
      quotas: [],
    };
    done(await w.pass());
    expect(w.ids('deletePod')).toEqual([]);
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.message).toContain(
      'pods "demo-0" is forbidden: maximum memory usage per Container is 2Gi, but limit is 4Gi',
    );
  });

  it('reads nothing when no live pod drifts (a steady pass, a scale-up) or while a suspend is asked', async () => {
    const steady = editedRunningSet(() => {});
    done(await steady.pass());
    const scaled = editedRunningSet((c) => {
      c.spec.agent.replicas = 3;
    });
    scaled.limits = quota('1');
    done(await scaled.pass());
    expect(scaled.ids('createPod').length).toBeGreaterThan(0);
    const suspended = editedRunningSet((c) => {
      toFourGi(c);
      c.spec.suspend = true;
    });
    done(await suspended.pass());
    expect([steady.limitReads, scaled.limitReads, suspended.limitReads]).toEqual([0, 0, 0]);
  });

  it('a failed read fails the pass (ReconcileFailed, retried) and touches no pod: the replacement is not known to be admitted', async () => {
    const w = editedRunningSet(toFourGi);
    w.limitsError = 'limitranges is forbidden (Forbidden, HTTP 403)';
    const step = done(await w.pass());
    expect(step.result.error).toBe(
      "read the namespace's limits before replacing pods: limitranges is forbidden (Forbidden, HTTP 403)",
    );
    expect(w.ids('deletePod')).toEqual([]);
  });
});

describe('a pending main no node can take says so (ours: pending-main-names-missing-node)', () => {
  const NODES = [{ [Labels.nodePool]: 'default', [Labels.hostname]: 'node-a' }];
  /** A new set whose main the pass created and no node has taken yet (no nodeName, no VM). */
  function pendingSet(edit: (c: CocoonSet) => void): PlanWorld {
    const cs = finalizedSet((c) => {
      c.spec.agent.replicas = 1;
      edit(c);
    });
    const w = new PlanWorld(cs, [buildAgentPod(cs, 0, '', '')]);
    w.nodes = NODES;
    return w;
  }

  it('a mistyped pool: Pending with Progressing=False NoMatchingNode naming the labels and a Warning Event, looked at again in 30 s; without the patch Pending Reconciling with no reason', async () => {
    const w = pendingSet((c) => {
      c.spec.nodePool = 'gpu-typo';
    });
    const step = done(await w.pass());
    expect(step.result.requeueAfterMs).toBe(NO_NODE_RECHECK_MS);
    const message =
      "no node has the labels main pod ns/demo-0 asks for (cocoonstack.io/pool=gpu-typo): it waits Pending; add such a node or fix the spec (spec.nodePool, spec.nodeName; a set's snapshotCompatibilityClass cannot change once set)";
    expect(w.cs.status?.phase).toBe('Pending');
    expect(w.cs.status?.conditions?.find((c) => c.type === 'Progressing')).toMatchObject({
      status: 'False',
      reason: 'NoMatchingNode',
      message,
    });
    expect(w.events).toEqual([{ eventType: 'Warning', reason: 'NoMatchingNode', message }]);
    expect(w.ids('createPod')).toEqual([]);

    const old = pendingSet((c) => {
      c.spec.nodePool = 'gpu-typo';
    });
    expect(done(await old.pass({ pendingMainNamesMissingNode: false })).result.requeueAfterMs).toBe(
      REQUEUE_WAIT_FOR_MAIN_MS,
    );
    expect(old.log.some((a) => a.type === 'anyNode')).toBe(false);
    expect(old.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).toBe('Reconciling');
  });

  it('a mistyped pin and a CPU class no node has are named too; a main whose labels some node has waits as before (5 s, no reason)', async () => {
    const pinned = pendingSet((c) => {
      c.spec.nodeName = 'node-typo';
    });
    done(await pinned.pass());
    expect(pinned.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.message).toContain(
      `(cocoonstack.io/pool=default,${Labels.hostname}=node-typo)`,
    );
    const classed = pendingSet((c) => {
      c.spec.snapshotCompatibilityClass = 'epyc-typo';
    });
    done(await classed.pass());
    expect(classed.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).toBe(
      'NoMatchingNode',
    );

    const fine = pendingSet(() => {});
    expect(done(await fine.pass()).result.requeueAfterMs).toBe(REQUEUE_WAIT_FOR_MAIN_MS);
    expect(fine.cs.status?.conditions?.find((c) => c.type === 'Progressing')?.reason).toBe('Reconciling');
  });
});
