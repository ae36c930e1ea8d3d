import { Agent } from 'undici';
import type { Clock } from '../../src/clock.js';
import type { LlmApi } from '../../src/config/api.js';
import { adaptiveRateLimit } from '../../src/http/interceptor.js';
import type { RejectionMode } from '../../src/http/refusal.js';

/**
 * An undici Agent composed with an interceptor that meters `origin` as the LLM API `api` (no other
 * origin limited), closed (agent, then interceptor) by the test's `cleanups`.
 */
export function llmAgent(
  options: { origin: string; api: LlmApi; rejection: RejectionMode; clock: Clock },
  cleanups: (() => unknown)[],
) {
  const interceptor = adaptiveRateLimit({
    limiters: { llm: { origins: [options.origin], api: options.api } },
    default: false,
    rejection: options.rejection,
    clock: options.clock,
  });
  const agent = new Agent().compose(interceptor);
  cleanups.push(
    () => agent.close(),
    () => interceptor.close(),
  );
  return { interceptor, agent };
}
