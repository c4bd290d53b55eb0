// OpenAI's Responses API (`POST /v1/responses`) on a chat profile, the API the AI SDK's OpenAI
// provider and OpenAI's Agents SDK speak by default: one answer and its `output_text`, a stream
// through the client's `responses.stream()` helper, and a function-tool round trip (the call comes
// back as a `function_call` item, its result goes back as a `function_call_output` item). Each
// request here sends the whole conversation in `input`; the service also keeps recent answers in
// memory for a while, so `previous_response_id` and `item_reference` work too (docs/api.md, Kept
// responses).
// The Responses API goes beyond the specification, so it is off until an operator turns it on:
//   node bin/service-deck.js extensions enable responses     (or the console's overview)
// Run: TOKEN=sd-... node examples/responses.mjs     (MODEL=<profile name> for another chat profile)
import OpenAI from 'openai';

const { API = 'http://127.0.0.1:8120', TOKEN, MODEL = 'tiny-chat' } = process.env;
if (!TOKEN) throw new Error('Set TOKEN to the API token that `npm run demo` printed (see examples/README.md).');
const client = new OpenAI({ baseURL: `${API}/v1`, apiKey: TOKEN });

// While the Responses API is off, the route answers 404 like an unknown route: say how to turn it on.
try {
  await client.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 1 });
} catch (error) {
  if (error instanceof OpenAI.NotFoundError && error.code === 'unknown_route') {
    console.error('The Responses API is off on this endpoint: turn it on with `node bin/service-deck.js extensions enable responses`, then run this again.');
    process.exit(1);
  }
  throw error;
}

// one answer: output_text is the text of its message items
const answer = await client.responses.create({ model: MODEL, instructions: 'Be brief.', input: 'Hello', max_output_tokens: 32 });
console.log(answer.status, answer.usage); // incomplete { input_tokens: 33, …, output_tokens: 32, … } (the demo model never ends a turn)
console.log(answer.output_text);

// a stream: the text as it comes, then the whole response
const stream = client.responses.stream({ model: MODEL, input: 'Hello', max_output_tokens: 32 });
stream.on('response.output_text.delta', (event) => process.stdout.write(event.delta));
const final = await stream.finalResponse();
console.log(`\n${final.status}: ${final.usage.output_tokens} tokens`); // incomplete: 32 tokens

// a function tool, which the client runs: here a table
const weather = { Berlin: { temperature: 21, sky: 'cloudy' }, Paris: { temperature: 24, sky: 'clear' } };
const tools = [
  {
    type: 'function',
    name: 'get_weather',
    description: 'The current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Berlin', 'Paris'] } }, required: ['city'], additionalProperties: false },
    strict: true,
  },
];
const question = { role: 'user', content: 'Weather in Berlin?' };

const wholeJson = (text) => {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
};
/**
 * Asks for the call and keeps the complete ones. A real model makes it at once and ends its turn;
 * the demo's tiny-chat (random weights) calls again and again until max_output_tokens cuts the
 * last call off, and now and then spends the tokens on text first, so it is asked up to three times.
 */
async function askForCalls() {
  for (let attempt = 1; ; attempt += 1) {
    const called = await client.responses.create({ model: MODEL, input: [question], tools, tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 300 });
    const calls = called.output.filter((item) => item.type === 'function_call' && wholeJson(item.arguments));
    if (calls.length > 0) return calls;
    if (attempt === 3) throw new Error(`no complete function call came back in 3 tries (status: ${called.status})`);
  }
}
const calls = await askForCalls();

const outputs = calls.map((call) => {
  const { city } = JSON.parse(call.arguments);
  console.log(`${call.name}(${call.arguments})`);
  return { type: 'function_call_output', call_id: call.call_id, output: JSON.stringify(weather[city] ?? { error: `no weather for ${city}` }) };
});
const answered = await client.responses.create({ model: MODEL, input: [question, ...calls, ...outputs], tools, max_output_tokens: 32 });
console.log(`${calls.length} call(s) answered; the model says:`, answered.output_text);
