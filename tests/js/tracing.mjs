// One tracer provider exporting OTLP/HTTP protobuf to the URL given as the first argument.
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';

// Spans started inside an async call (the AI SDK's steps) find their parent through this.
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());

export function tracerProvider(serviceName) {
  const url = process.argv[2];
  if (!url) {
    console.error('usage: node <script> http://HOST:PORT/v1/traces');
    process.exit(2);
  }
  const headers = process.env.AGENTGUARD_TOKEN ? { Authorization: `Bearer ${process.env.AGENTGUARD_TOKEN}` } : {};
  return new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': serviceName }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url, headers }))],
  });
}
