/**
 * The keys of the methods the library's modules call on each other's exported classes and a
 * user must not: symbols, as undici keeps its internals (`kDispatch`), so that no such method has
 * a name on a limiter or a registry. Not exported from the package.
 */

// A permit's answer, told to its limiter (or a shared budget).
export const kSuccess = Symbol('adaptive-rate-limit.success');
export const kThrottled = Symbol('adaptive-rate-limit.throttled');
export const kFailed = Symbol('adaptive-rate-limit.failed');
/**
 * A permit ended with no answer of its own to count (a budget that did not run out, in a request
 * another budget throttled): its units' slot is freed, no outcome is told (see `BudgetedPermit`).
 */
export const kQuiet = Symbol('adaptive-rate-limit.quiet');
/** A permit of several budgets whose request the API refused without doing it (see `BudgetedPermit`). */
export const kRefused = Symbol('adaptive-rate-limit.refused');
/**
 * A permit of several budgets whose request never reached the API (its connection refused, its
 * slot refused, its retry not sent): see `BudgetedPermit`.
 */
export const kNotSent = Symbol('adaptive-rate-limit.notSent');
/**
 * A permit whose request failed with no HTTP answer (a connection reset, a socket error, a
 * timeout): failed as `failed()` is, but no answer came that could leave a policy out, so the
 * announced quotas stay as they were (see `noAnswer`).
 */
export const kNoAnswer = Symbol('adaptive-rate-limit.noAnswer');
/**
 * A permit throttled whose wait is only the reset of an exhausted policy the answer announced (an
 * IETF `RateLimit` with `r=0`, no `Retry-After`): the limiter pauses as that policy's learned shape
 * says (see `throttledByQuota`).
 */
export const kQuotaWait = Symbol('adaptive-rate-limit.quotaWait');
/**
 * A permit throttled by an answer that asks for a wait and is no budget's throttle (OpenAI's limit
 * per day): the limiter pauses and counts a throttle, without a cut (see `throttledWithoutCut`).
 */
export const kPauseOnly = Symbol('adaptive-rate-limit.pauseOnly');

// An acquire an adapter cancels without an AbortSignal (`WaitCancel`, in src/limiter/waiting-line.ts).
export const kWaitCancel = Symbol('adaptive-rate-limit.waitCancel');

// The bound of a wait an adapter makes outside a limiter's line (a maxConcurrent slot).
export const kWaitBound = Symbol('adaptive-rate-limit.waitBound');
/** The deadlines a maxConcurrent gate holds: one per request waiting for a slot with a bound. */
export const kHeldDeadlines = Symbol('adaptive-rate-limit.heldDeadlines');

// One budget's books, for the limiter of several budgets it belongs to.
export const kCanGrant = Symbol('adaptive-rate-limit.canGrant');
export const kTake = Symbol('adaptive-rate-limit.take');
export const kReadyAt = Symbol('adaptive-rate-limit.readyAt');
export const kPredictWait = Symbol('adaptive-rate-limit.predictWait');
export const kHeldBack = Symbol('adaptive-rate-limit.heldBack');
export const kGiveBack = Symbol('adaptive-rate-limit.giveBack');
/**
 * Charges units a limiter's announced quotas never counted: a refused call's `usage`, charged in
 * place of the estimate it gave back (see `AnnouncedBucket.charge`).
 */
export const kChargeUncounted = Symbol('adaptive-rate-limit.chargeUncounted');

/** Whether a limiter (any of its budgets) owes units its bucket does not hold: see `RateGate.owed`. */
export const kOwes = Symbol('adaptive-rate-limit.owes');

// What a shared budget asks of its local limiter.
export const kAlignSlots = Symbol('adaptive-rate-limit.alignSlots');
export const kRecentAcceptedRate = Symbol('adaptive-rate-limit.recentAcceptedRate');
export const kLastAnswerAt = Symbol('adaptive-rate-limit.lastAnswerAt');
/** A shared budget's local limiter: the budget's books, not a crowd wait, answer a bare 429. */
export const kNoCrowdWait = Symbol('adaptive-rate-limit.noCrowdWait');

// What the HTTP adapters ask of the registry, by normalized origin.
export const kLimiterForOrigin = Symbol('adaptive-rate-limit.limiterForOrigin');
export const kRouteForOrigin = Symbol('adaptive-rate-limit.routeForOrigin');
export const kPartitionForOrigin = Symbol('adaptive-rate-limit.partitionForOrigin');
export const kHoldOrigin = Symbol('adaptive-rate-limit.holdOrigin');
export const kAddBusyCheck = Symbol('adaptive-rate-limit.addBusyCheck');
export const kChanges = Symbol('adaptive-rate-limit.changes');
export const kTouchOrigin = Symbol('adaptive-rate-limit.touchOrigin');
/** Registry: keeps a key's pause, answered through an overflow limiter (`OriginPool.keepPause`). */
export const kKeepPause = Symbol('adaptive-rate-limit.keepPause');
