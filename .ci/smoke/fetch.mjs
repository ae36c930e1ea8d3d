// Node's global fetch through the interceptor (setGlobalDispatcher), and through a dispatcher
// passed to fetch, against a local server that throttles the first request of each path.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:http';
import { adaptiveRateLimit } from 'adaptive-rate-limit';
import { createSharedBudget, MemoryBudgetStore } from 'adaptive-rate-limit/redis';
import { Agent, getGlobalDispatcher, setGlobalDispatcher } from 'undici';

const seen = new Set();
const answers = [];
const server = createServer((req, res) => {
  const first = !seen.has(req.url);
  seen.add(req.url);
  answers.push(first ? 429 : 200);
  if (first) res.writeHead(429, { 'retry-after': '0' }).end('slow down');
  else res.writeHead(200, { 'content-type': 'text/plain' }).end(`ok ${req.url}`);
});
server.listen(0, '127.0.0.1');
await once(server, 'listening');
const origin = `http://127.0.0.1:${server.address().port}`;

const rl = adaptiveRateLimit({ default: { initialUnitsPerMinute: 600_000 } });
const agent = new Agent();
const previous = getGlobalDispatcher();
try {
  setGlobalDispatcher(agent.compose(rl));
  const global = await fetch(`${origin}/global`);
  assert.equal(global.status, 200);
  assert.equal(await global.text(), 'ok /global');

  const passed = await fetch(`${origin}/passed`, { dispatcher: agent.compose(rl) });
  assert.equal(passed.status, 200);
  assert.equal(await passed.text(), 'ok /passed');

  assert.deepEqual(answers, [429, 200, 429, 200]);
  assert.equal(rl.registry.get(origin)?.snapshot().throttles, 2);

  // adaptive-rate-limit/redis without ioredis installed: the memory store needs none.
  const budget = createSharedBudget({
    store: new MemoryBudgetStore(),
    name: 'smoke',
    initialUnitsPerMinute: 600,
  });
  (await budget.acquire()).success();
  await budget.close();
} finally {
  setGlobalDispatcher(previous);
  rl.close();
  await agent.close();
  server.close();
}
console.log(`fetch through the interceptor: ok (Node ${process.versions.node})`);

// adaptive-rate-limit/fetch: the same wrapper, without the interceptor.
const fetchEntry = await import('adaptive-rate-limit/fetch');
assert.equal(typeof fetchEntry.rateLimitedFetch, 'function');
assert.equal(fetchEntry.adaptiveRateLimit, undefined);
// adaptive-rate-limit/otel needs the optional @opentelemetry/api, which is not installed here:
// importing it names the package; the root did not need it.
await assert.rejects(import('adaptive-rate-limit/otel'), /@opentelemetry\/api/);
console.log('adaptive-rate-limit/fetch, and /otel without @opentelemetry/api: ok');
