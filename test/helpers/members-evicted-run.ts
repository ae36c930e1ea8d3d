// Run with NODE_DEBUG=adaptive-rate-limit (test/redis-members-evicted.test.ts): three members of
// a budget on the Redis at argv[2], heard twice; the :members key deleted twice, each time
// followed by a heartbeat of every member.
import { Redis } from 'ioredis';
import { ManualClock } from '../../src/clock.js';
import { createSharedBudget } from '../../src/redis/index.js';

const url = process.argv[2] as string;
const name = `members-evicted-run-${process.pid}`;
const clock = new ManualClock();
const budgets = [0, 1, 2].map(() =>
  createSharedBudget({ name, redis: url, clock, heartbeatInterval: 60_000, initialUnitsPerMinute: 600 }),
);
const redis = new Redis(url);
for (const b of [...budgets, ...budgets]) await b.refresh();
for (let i = 0; i < 2; i++) {
  await redis.del(`arl:{${name}}:members`);
  for (const b of budgets) await b.refresh();
}
await Promise.all(budgets.map((b) => b.close()));
redis.disconnect();
console.log(`done ${name}`);
