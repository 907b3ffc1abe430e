export * from './types.js';
export { threadKey } from './codec.js';
export * from './mutate.js';
export * from './memory.js';
export * from './kv.js';
