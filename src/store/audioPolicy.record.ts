// The audio policy record as the store keeps it (spec 2.4): plain types with no imports, so the
// machines that decide on it (machines/audioPolicy, machines/supervisor) import them from the
// store, and the store imports nothing from the machines.

export type AudioKind = 'tts' | 'stt';
export type AudioMode = 'auto' | 'warm' | 'per_request';

/** The stored record (spec 2.4): `warm` needs a profile, the other modes may name one or none. */
export interface AudioPolicyRecord {
  kind: AudioKind;
  mode: AudioMode;
  profileId: string | null;
}
