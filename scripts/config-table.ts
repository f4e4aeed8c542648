/**
 * Prints the configuration table of docs/configuration.md from src/config.ts ENV_SETTINGS (the single
 * source), so the docs cannot drift: test/unit/readme.test.ts checks the page holds exactly this output.
 *   npx tsx scripts/config-table.ts
 */
import { pathToFileURL } from 'node:url';
import { ENV_SETTINGS } from '../src/config.js';

/** The markdown table: env, flag, default, required, description. */
export function configTable(): string {
  const esc = (s: string) => s.replaceAll('|', '\\|');
  const rows = ENV_SETTINGS.map(
    (s) =>
      `| \`${s.env}\` | \`${s.flag}\` | ${s.default === undefined || s.default === '' ? '' : `\`${esc(s.default)}\``} | ${s.required ? 'yes' : ''} | ${esc(s.description)} |`,
  );
  return ['| env | flag | default | required | meaning |', '| --- | --- | --- | --- | --- |', ...rows].join(
    '\n',
  );
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) console.log(configTable());
