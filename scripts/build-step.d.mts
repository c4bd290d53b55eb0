// Types of scripts/build-step.mjs for the tests that import it.
export interface Step {
  inputs: string[];
  output: string;
  command: string[];
}
export declare const STEPS: { service: Step; console: Step };
export declare function inputHash(base: string, inputs: string[]): string;
export declare function runStep(base: string, name: string, step: Step, options?: { force?: boolean; args?: string[] }): 'up to date' | 'built';
