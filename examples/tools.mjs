// Tools: the model asks for a function call, this script runs the function and sends the result
// back as a tool message, and the model answers with it. `tool_choice` names the function, so the
// call comes even from the demo's `tiny-chat` (random weights); a real model calls it once and
// ends its turn with finish_reason "tool_calls", while the tiny one calls again and again until
// max_tokens cuts the last call off. So only complete calls (arguments that are whole JSON) go back.
// Run: TOKEN=sd-... node examples/tools.mjs     (MODEL=<profile name> for another chat profile)
import OpenAI from 'openai';

const { API = 'http://127.0.0.1:8120', TOKEN, MODEL = 'tiny-chat' } = process.env;
if (!TOKEN) throw new Error('Set TOKEN to the API token that `npm run demo` printed (see examples/README.md).');
const client = new OpenAI({ baseURL: `${API}/v1`, apiKey: TOKEN });

/** The function the model may call, here a table. */
const weather = { Berlin: { temperature: 21, sky: 'cloudy' }, Paris: { temperature: 24, sky: 'clear' } };
const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The current weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Berlin', 'Paris'] } }, required: ['city'] },
    },
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
 * Asks for the call and keeps the complete ones. A real model makes it at once; the demo's
 * tiny-chat (random weights) now and then spends max_tokens on text before its first call is
 * whole (about one run in fifty), so it is asked up to three times.
 */
async function askForCalls() {
  for (let attempt = 1; ; attempt += 1) {
    const called = await client.chat.completions.create({
      model: MODEL,
      messages: [question],
      tools,
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      max_tokens: 300,
    });
    const { message, finish_reason } = called.choices[0];
    const calls = (message.tool_calls ?? []).filter((call) => call.type === 'function' && wholeJson(call.function.arguments));
    if (calls.length > 0) return { message, calls };
    if (attempt === 3) throw new Error(`no complete tool call came back in 3 tries (finish_reason: ${finish_reason})`);
  }
}
const { message, calls } = await askForCalls();

const results = calls.map((call) => {
  const { city } = JSON.parse(call.function.arguments);
  console.log(`${call.function.name}(${call.function.arguments})`);
  return { role: 'tool', tool_call_id: call.id, content: JSON.stringify(weather[city] ?? { error: `no weather for ${city}` }) };
});
const answer = await client.chat.completions.create({
  model: MODEL,
  messages: [question, { role: 'assistant', content: message.content, tool_calls: calls }, ...results],
  max_tokens: 32,
});
console.log(`${calls.length} call(s) answered; the model says:`, answer.choices[0].message.content);
