// A Vercel AI SDK agent (generateText with tools and a step limit) with its telemetry switched
// on, run against the SDK's own mock model: the model asks for the same lookup again and again,
// then answers. Its ai.toolCall spans (name, arguments, result) and ai.generateText.doGenerate
// spans are what agentguard serve judges.
import { generateText, tool, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { z } from 'zod';
import { tracerProvider } from './tracing.mjs';

const provider = tracerProvider('js-vercel-agent');
const tracer = provider.getTracer('ai');
const mode = process.argv[3] || 'loop';

const usage = {
  inputTokens: { total: 100, noCache: 100, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 20, text: 20, reasoning: undefined },
};
// A model or a tool answers in milliseconds at the very least; span starts are stamped in ms.
const tick = () => new Promise((resolve) => setTimeout(resolve, 2));
let turn = 0;
const model = new MockLanguageModelV3({
  modelId: 'mock-model',
  doGenerate: async () => {
    await tick();
    turn += 1;
    const lastTurn = mode === 'loop' ? 6 : 3;
    if (turn < lastTurn) {
      const input = mode === 'loop' ? { city: 'Paris' } : { city: ['Paris', 'Rome', 'Oslo'][turn - 1] };
      return {
        content: [{ type: 'tool-call', toolCallId: `call-${turn}`, toolName: 'weather', input: JSON.stringify(input) }],
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
        usage,
        warnings: [],
      };
    }
    return {
      content: [{ type: 'text', text: 'It is sunny everywhere you asked about.' }],
      finishReason: { unified: 'stop', raw: 'stop' },
      usage,
      warnings: [],
    };
  },
});

const result = await generateText({
  model,
  prompt: 'What is the weather?',
  tools: {
    weather: tool({
      description: 'Current weather in a city',
      inputSchema: z.object({ city: z.string() }),
      // The loop: the same question always gets the same answer.
      execute: async ({ city }) => {
        await tick();
        return { city, forecast: mode === 'loop' ? 'unknown' : `sunny in ${city}` };
      },
    }),
  },
  stopWhen: stepCountIs(10),
  experimental_telemetry: { isEnabled: true, tracer, functionId: `weather-${mode}` },
});
console.log(JSON.stringify({ steps: result.steps.length, text: result.text }));

await provider.forceFlush();
await provider.shutdown();
