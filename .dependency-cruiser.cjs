// The layer rules, read from the layer table of docs/architecture.md (its source: change the table
// and the rules follow). Each row, top to bottom, is a floor: a module may import its own floor
// and the ones below, type imports included; no floor imports what stands beside them (src/redis,
// src/simulate, src/otel, the entry points); no circle. `npm run lint` runs `depcruise src`.
const { readFileSync } = require('node:fs');
const { join } = require('node:path');

/** The table's rows, top floor first: `{ name, paths }`, each path `src/...` as written. */
function layerTable() {
  const doc = readFileSync(join(__dirname, 'docs', 'architecture.md'), 'utf8');
  const section = doc.split('## The layers')[1];
  if (section === undefined) throw new Error('docs/architecture.md: no "## The layers" section');
  const rows = section
    .split('\n')
    .filter((line) => line.startsWith('| ') && !line.startsWith('| layer ') && !line.startsWith('| ---'))
    .map((line) => {
      const [name = '', where = ''] = line
        .split('|')
        .slice(1, 3)
        .map((cell) => cell.trim());
      const paths = [...where.matchAll(/`(src\/[^`]*)`/g)].map((m) => m[1]);
      return { name, paths };
    })
    .filter((row) => row.paths.length > 0);
  if (rows.length < 2) throw new Error('docs/architecture.md: the layer table has fewer than two floors');
  return rows;
}

const literal = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** A folder (`src/http/`) covers what is under it; a file (`src/clock.ts`) itself. */
const pattern = (paths) =>
  `^(${paths.map((p) => (p.endsWith('/') ? literal(p) : `${literal(p)}$`)).join('|')})`;

const layers = layerTable();
const allLayers = pattern(layers.flatMap((layer) => layer.paths));

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'Modules that import each other: a change to one is a change to all.',
      from: {},
      to: { circular: true },
    },
    ...layers.slice(1).map((layer, i) => ({
      name: `no-upward-from-${layer.name.replace(/\W+/g, '-')}`,
      severity: 'error',
      comment: `The ${layer.name} layer imports only itself and the layers below it (docs/architecture.md).`,
      from: { path: pattern(layer.paths) },
      to: { path: pattern(layers.slice(0, i + 1).flatMap((above) => above.paths)) },
    })),
    {
      name: 'no-layer-imports-beside',
      severity: 'error',
      comment:
        'No layer imports src/redis, src/simulate, src/otel or an entry point. The registry loads the ' +
        'Redis code with a dynamic import(), which is no dependency here.',
      from: { path: allLayers },
      to: { path: '^src/', pathNot: allLayers },
    },
    {
      name: 'root-import-small',
      severity: 'error',
      comment: "import 'adaptive-rate-limit' loads no Redis and no simulator module.",
      from: { path: '^src/index\\.ts$' },
      to: { path: '^src/(redis|simulate)/', reachable: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    // A dynamic import() is loaded when it runs, not with its importer: the registry's lazy door to
    // src/redis/ stays out of the graph.
    exclude: { path: '^(node_modules|dist)/', dynamic: true },
    // TypeScript 7 has no JavaScript API for dependency-cruiser: swc parses, type imports included.
    parser: 'swc',
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
