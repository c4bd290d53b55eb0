// A streamed chat answer: the text as it comes, then the usage in a last chunk.
// Run: TOKEN=sd-... node examples/stream.mjs     (MODEL=<profile name> for another chat profile)
import OpenAI from 'openai';

const { API = 'http://127.0.0.1:8120', TOKEN, MODEL = 'tiny-chat' } = process.env;
if (!TOKEN) throw new Error('Set TOKEN to the API token that `npm run demo` printed (see examples/README.md).');
const client = new OpenAI({ baseURL: `${API}/v1`, apiKey: TOKEN });

const stream = await client.chat.completions.create({
  model: MODEL,
  messages: [{ role: 'user', content: 'Hello' }],
  max_tokens: 32,
  stream: true,
  stream_options: { include_usage: true },
});
for await (const chunk of stream) {
  process.stdout.write(chunk.choices[0]?.delta.content ?? '');
  if (chunk.usage) console.log('\n', chunk.usage);
}
