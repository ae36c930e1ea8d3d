// adaptive-rate-limit/redis: one budget shared by several processes through Redis, or by several
// members of one process through memory.

import '../limiter/debug-log.js';

export { MemoryBudgetStore, type MemoryBudgetStoreOptions } from './memory-store.js';
export type { SharedBudgetOptions } from './options.js';
export type { SharedBudgetEventMap, SharedState } from './shared-budget.js';
export { createSharedBudget, SharedBudget, SharedBudgetUnavailableError } from './shared-budget.js';
export type {
  Answer,
  BudgetStore,
  CutReply,
  CutRequest,
  HeartbeatReply,
  HeartbeatRequest,
  PauseRequest,
} from './store.js';
