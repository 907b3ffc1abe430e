/**
 * A function tool of the support agent (examples/yaml-agents/support/agent.yaml): Troupe imports this
 * module and calls `lookupOrder` with the arguments the model chose, already checked against the
 * parameters declared in the agent.yaml.
 */
interface Order {
  status: 'processing' | 'shipped' | 'delivered' | 'lost';
  items: string[];
  eta?: string;
}

const ORDERS: ReadonlyMap<string, Order> = new Map([
  ['A-1001', { status: 'shipped', items: ['Sencha 100 g', 'Glass teapot'], eta: 'Friday' }],
  ['A-1002', { status: 'processing', items: ['Earl Grey 250 g'] }],
  ['A-1003', { status: 'lost', items: ['Cast-iron teapot'] }],
]);

export function lookupOrder(args: { order_id: string }): { order_id: string } & (Order | { error: string }) {
  const id = args.order_id.trim().toUpperCase();
  const order = ORDERS.get(id);
  return order ? { order_id: id, ...order } : { order_id: id, error: 'no such order' };
}
