// Heap probe for `npm run bench -- --only shipped` (docs/performance.md#a-cache-of-150-session-37). Not
// loaded by the operator. Load it into the shipped child with
//   --shipped-env "NODE_OPTIONS=--max-semi-space-size=2 --require $PWD/bench/probes/heap-stats.cjs"
// (that replaces the image's NODE_OPTIONS, so repeat its value). `--require` reaches every thread, the
// Temporal workflow thread included. Each thread appends one line every 250 ms to
// $HEAP_PROBE_DIR/heap-<pid>-<main|t<threadId>>.tsv (default /tmp): epoch ms, then MiB of V8 heap used,
// heap total, external memory, malloced memory, the thread's peak used so far, and the process's RSS.
// While the file $HEAP_PROBE_DIR/snap-now exists, the next workflow-thread tick removes it and writes a
// heap snapshot of that thread next to the .tsv (it stops the thread for seconds: measure nothing then);
// snap-main-now does the same for the main thread.
'use strict';
const { isMainThread, threadId } = require('node:worker_threads');
const v8 = require('node:v8');
const fs = require('node:fs');
const path = require('node:path');

const dir = process.env.HEAP_PROBE_DIR || '/tmp';
const out = fs.openSync(
  path.join(dir, `heap-${process.pid}-${isMainThread ? 'main' : `t${threadId}`}.tsv`),
  'a',
);
const mib = (n) => (n / 2 ** 20).toFixed(1);
let peak = 0;
setInterval(() => {
  const h = v8.getHeapStatistics();
  peak = Math.max(peak, h.used_heap_size);
  const cols = [h.used_heap_size, h.total_heap_size, h.external_memory, h.malloced_memory, peak];
  fs.writeSync(out, `${Date.now()}\t${cols.map(mib).join('\t')}\t${mib(process.memoryUsage.rss())}\n`);
  const trigger = path.join(dir, isMainThread ? 'snap-main-now' : 'snap-now');
  if (fs.existsSync(trigger)) {
    fs.unlinkSync(trigger);
    const file = v8.writeHeapSnapshot(path.join(dir, `snap-${process.pid}-${Date.now()}.heapsnapshot`));
    fs.writeSync(out, `# snapshot ${file}\n`);
  }
}, 250).unref();
