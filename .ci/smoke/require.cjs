// A CommonJS caller: require() of the ESM package (require(esm), Node >= 20.19 and 22.12).
const assert = require('node:assert/strict');
const { adaptiveRateLimit, AdaptiveRateLimiter } = require('adaptive-rate-limit');
const { createSharedBudget } = require('adaptive-rate-limit/redis');

assert.equal(typeof adaptiveRateLimit, 'function');
assert.equal(typeof createSharedBudget, 'function');
const limiter = new AdaptiveRateLimiter({ initialUnitsPerMinute: 60 });
assert.ok(limiter.tryAcquire());
limiter.close();
console.log(`require(): ok (Node ${process.versions.node})`);
