export * from './a2a.js';
export * from './errors.js';
export * from './routing.js';
export * from './headers.js';
export * from './codec.js';
export * from './wire.js';
export * from './handoff.js';
