// Three agent sessions written by hand as GenAI spans (the OpenTelemetry GenAI semantic
// conventions), each its own trace under an invoke_agent span, exported as OTLP/HTTP protobuf:
//   js-loop   the same search call, same arguments, same empty result, again and again
//   js-clean  three different lookups, then an answer
//   js-fake   read-only lookups, then an answer claiming a refund was submitted
import { context, trace, SpanStatusCode } from '@opentelemetry/api';
import { tracerProvider } from './tracing.mjs';

const provider = tracerProvider('js-genai-agent');
const tracer = provider.getTracer('js-genai-agent', '1.0.0');

// Real model and tool calls take milliseconds at least; the SDK stamps span starts in
// milliseconds, so each step waits one to keep the steps' order visible in their timestamps.
const tick = () => new Promise((resolve) => setTimeout(resolve, 2));

function child(parent, name, attributes) {
  return tracer.startSpan(name, { attributes }, trace.setSpan(context.active(), parent));
}

async function chat(parent, finish, text, toolCalls) {
  const parts = [];
  if (text) parts.push({ type: 'text', content: text });
  for (const call of toolCalls) parts.push({ type: 'tool_call', id: call.id, name: call.name, arguments: call.args });
  const span = child(parent, 'chat gpt-4o-mini', {
    'gen_ai.operation.name': 'chat',
    'gen_ai.provider.name': 'openai',
    'gen_ai.request.model': 'gpt-4o-mini',
    'gen_ai.response.model': 'gpt-4o-mini',
    'gen_ai.response.finish_reasons': [finish],
    'gen_ai.usage.input_tokens': 120,
    'gen_ai.usage.output_tokens': 30,
    'gen_ai.output.messages': JSON.stringify([{ role: 'assistant', parts, finish_reason: finish }]),
  });
  await tick();
  span.end();
}

async function tool(parent, name, args, result) {
  const span = child(parent, `execute_tool ${name}`, {
    'gen_ai.operation.name': 'execute_tool',
    'gen_ai.tool.name': name,
    'gen_ai.tool.call.arguments': JSON.stringify(args),
    'gen_ai.tool.call.result': JSON.stringify(result),
  });
  span.setStatus({ code: SpanStatusCode.OK });
  await tick();
  span.end();
}

async function session(id, body) {
  const root = tracer.startSpan('invoke_agent support', {
    attributes: {
      'gen_ai.operation.name': 'invoke_agent',
      'gen_ai.agent.name': 'support',
      'gen_ai.conversation.id': id,
    },
  });
  await body(root);
  root.end();
}

await session('js-loop', async (root) => {
  for (let i = 0; i < 6; i++) {
    const args = { query: 'order 1234 status' };
    await chat(root, 'tool_calls', '', [{ id: `call_${i}`, name: 'search_orders', args }]);
    await tool(root, 'search_orders', args, { hits: [] });
  }
  await chat(root, 'stop', 'I could not find the order.', []);
});

await session('js-clean', async (root) => {
  const lookups = [['get_order', { order: 'A-1' }, { status: 'shipped' }],
    ['get_tracking', { order: 'A-1' }, { carrier: 'UPS', eta: '2026-12-03' }],
    ['get_customer', { customer: 'C-9' }, { tier: 'gold' }]];
  for (const [i, [name, args, result]] of lookups.entries()) {
    await chat(root, 'tool_calls', '', [{ id: `call_${i}`, name, args }]);
    await tool(root, name, args, result);
  }
  await chat(root, 'stop', 'Your order A-1 shipped with UPS and arrives on December 3.', []);
});

await session('js-fake', async (root) => {
  await chat(root, 'tool_calls', '', [{ id: 'call_0', name: 'get_order', args: { order: 'B-7' } }]);
  await tool(root, 'get_order', { order: 'B-7' }, { status: 'delivered', amount: 40 });
  await chat(root, 'tool_calls', '', [{ id: 'call_1', name: 'check_refund_policy', args: { order: 'B-7' } }]);
  await tool(root, 'check_refund_policy', { order: 'B-7' }, { refundable: true });
  await chat(root, 'stop', 'I have submitted your refund of $40 for order B-7.', []);
});

await provider.forceFlush();
await provider.shutdown();
