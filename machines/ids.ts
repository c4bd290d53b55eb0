// systemIds and tags shared by the machines and the adapters that look actors up.
export const SYSTEM_IDS = {
  supervisor: 'supervisor',
  listener: 'listener',
  queue: 'queue',
} as const;

/** The worker machines, children of the supervisor: the systemId of each kind's. */
export const WORKER_IDS = {
  chat: 'chatWorker',
  image: 'imageWorker',
  tts: 'ttsWorker',
  stt: 'sttWorker',
  enhancer: 'enhancerWorker',
} as const;

export const TAGS = {
  /** The inference listener takes new requests only in a state with this tag. */
  accepting: 'accepting',
} as const;
