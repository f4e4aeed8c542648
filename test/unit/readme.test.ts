/**
 * The docs: docs/configuration.md holds the configuration table generated from src/config.ts, and every
 * relative link of README.md and docs/*.md points at a file that exists and, with a `#fragment`, at a
 * heading of that file (GitHub's anchor rule).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { configTable } from '../../scripts/config-table.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const PAGES = ['README.md', ...readdirSync(join(ROOT, 'docs')).map((f) => `docs/${f}`)].filter((p) =>
  p.endsWith('.md'),
);

/** GitHub's heading anchor: lower case, punctuation other than `-` and `_` dropped, spaces to `-`. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
}

function anchorsIn(file: string): Set<string> {
  const text = readFileSync(file, 'utf8').replace(/```[\s\S]*?```/g, '');
  return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => anchorOf(m[1]!)));
}

describe('docs', () => {
  it('docs/configuration.md holds the configuration table generated from ENV_SETTINGS', () => {
    const page = readFileSync(join(ROOT, 'docs/configuration.md'), 'utf8');
    const m = page.match(/<!-- config-table:start[^>]*-->\n([\s\S]*?)\n<!-- config-table:end -->/);
    expect(m, 'config-table markers missing from docs/configuration.md').not.toBeNull();
    expect(m![1]).toBe(configTable());
  });

  it('every relative link of README.md and docs/ resolves to a file and heading', () => {
    const broken: string[] = [];
    for (const page of PAGES) {
      const text = readFileSync(join(ROOT, page), 'utf8').replace(/```[\s\S]*?```/g, '');
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/.test(target!)) continue;
        const [path, fragment] = target!.split('#');
        const file = path ? resolve(dirname(join(ROOT, page)), path) : join(ROOT, page);
        if (!existsSync(file)) broken.push(`${page}: ${target} (no such file)`);
        else if (fragment && file.endsWith('.md') && !anchorsIn(file).has(fragment))
          broken.push(`${page}: ${target} (no such heading)`);
      }
    }
    expect(broken).toEqual([]);
  });
});
