// adaptive-rate-limit/redis: one budget shared by several processes through Redis.

export type { SharedBudgetOptions } from './options.js';
export type { SharedBudgetEventMap, SharedState } from './shared-budget.js';
export { createSharedBudget, SharedBudget, SharedBudgetUnavailableError } from './shared-budget.js';
