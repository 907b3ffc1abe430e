/**
 * The layer order of src/ (docs/architecture.md), checked by `npm run lint`.
 *
 * Each room (a folder directly under src/) may import only the rooms listed before it. Type-only imports
 * count (`tsPreCompilationDeps`), and so do dynamic imports. A strict order also rules out cycles between
 * rooms. A new folder under src/ must be added here, at its place, before anything may import it.
 */
const LAYERS = [
  'protocol', // wire schemas and types: A2A, headers, metadata keys, ctl, error codes
  'config', // agent.yaml and team.yaml: schemas, loader with positions, defaults
  'model', // the model contract: messages, tools, completions, ModelProvider
  'sanitiser', // the context sanitiser and its detectors
  'observability', // logger, redaction, traces, metrics, probes
  'routing', // router policy contract, scoring and LLM policies, client-routing rules
  'transport', // Transport, NATS and memory, subjects, JetStream ingress and leases
  'store', // ThreadStore: JetStream KV and memory
  'security', // roles, credentials, server configs, TLS (uses the transport)
  'sdk', // defineAgent, reply, remote agents, TroupeClient
  'machines', // pure XState machines
  'inspection', // the inspection stream (publishes on the transport, draws machines)
  'llm', // LLM agents: providers, tools, vector stores, synthesis
  'actors', // hosts: node, thread host, agent host, registry
  'team', // team assembly: defineTeam, loaders, the embedded mesh
  'eval', // agent evaluations (run a team)
  'gateway', // the A2A server
  'studio', // the local web UI
  'bin', // the troupe CLI
];

const room = (name) => `^src/${name}/`;
const any = (names) => `^src/(${names.join('|')})/`;

const layerRules = LAYERS.slice(0, -1).map((name, i) => ({
  name: `layer-${name}`,
  comment: `src/${name} sits below ${LAYERS.slice(i + 1).join(', ')}: it may not import them (docs/architecture.md)`,
  severity: 'error',
  from: { path: room(name) },
  to: { path: any(LAYERS.slice(i + 1)) },
}));

module.exports = {
  forbidden: [
    ...layerRules,
    {
      name: 'layer-root',
      comment: 'the package root (src/index.ts) exports the library, not the CLI',
      severity: 'error',
      from: { path: '^src/index\\.ts$' },
      to: { path: room('bin') },
    },
    {
      name: 'unknown-room',
      comment: 'every folder under src/ has a place in LAYERS (.dependency-cruiser.cjs) and in docs/architecture.md',
      severity: 'error',
      from: { path: '^src/' },
      to: { path: '^src/[^/]+/', pathNot: any(LAYERS) },
    },
    {
      name: 'no-cycle-between-rooms',
      comment: 'an import cycle that leaves its room',
      severity: 'error',
      from: { path: '^src/([^/]+)/' },
      to: { circular: true, via: { pathNot: '^src/$1/' } },
    },
    {
      name: 'machines-are-pure',
      comment: 'machines take no I/O: only the wire types, configuration, the model contract and the routing rules',
      severity: 'error',
      from: { path: room('machines') },
      to: { path: '^src/', pathNot: any(['protocol', 'config', 'model', 'routing', 'machines']) },
    },
    {
      name: 'machines-no-node-builtins',
      comment: 'machines take no I/O: no node: modules',
      severity: 'error',
      from: { path: room('machines') },
      to: { dependencyTypes: ['core'] },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['source', 'import', 'require', 'node', 'default', 'types'],
      extensions: ['.ts', '.tsx', '.js', '.mjs', '.cjs', '.d.ts'],
      mainFields: ['module', 'main', 'types', 'typings'],
    },
    reporterOptions: { text: { highlightFocused: true } },
  },
};
