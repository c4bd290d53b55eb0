/*
 * The STT worker's pocketsphinx engine (issue 5): a small program around libpocketsphinx that
 * loads the acoustic model, language model and dictionary once and then transcribes recording
 * after recording, so the model stays loaded between jobs instead of a process per file.
 *
 * Protocol on stdin/stdout (binary-safe, one job at a time):
 *   start:    prints {"ready":true} once the model is loaded (or {"error":...} and exits 1)
 *   request:  a line "<n>\n" with the byte count, then n bytes of 16-bit little-endian PCM,
 *             mono, 16 kHz (the service checked the WAV before)
 *   answer:   one line {"text":"..."} or {"error":"..."}
 *   end:      EOF on stdin
 * Options: -hmm DIR -lm FILE -dict FILE (Debian's pocketsphinx-en-us by default).
 */
#include <pocketsphinx.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BYTES (8 * 1024 * 1024)

static void put_json_string(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    putchar('"');
}

static void answer_error(const char *message) {
    fputs("{\"error\":", stdout);
    put_json_string(message);
    fputs("}\n", stdout);
    fflush(stdout);
}

int main(int argc, char **argv) {
    const char *hmm = "/usr/share/pocketsphinx/model/en-us/en-us";
    const char *lm = "/usr/share/pocketsphinx/model/en-us/en-us.lm.bin";
    const char *dict = "/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-hmm") == 0) hmm = argv[i + 1];
        else if (strcmp(argv[i], "-lm") == 0) lm = argv[i + 1];
        else if (strcmp(argv[i], "-dict") == 0) dict = argv[i + 1];
    }
    cmd_ln_t *config = cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", hmm, "-lm", lm, "-dict", dict, "-logfn", "/dev/null", NULL);
    if (config == NULL) {
        answer_error("pocketsphinx: the model options were refused");
        return 1;
    }
    ps_decoder_t *decoder = ps_init(config);
    if (decoder == NULL) {
        answer_error("pocketsphinx: the model could not be loaded");
        return 1;
    }
    fputs("{\"ready\":true}\n", stdout);
    fflush(stdout);

    char line[64];
    int16 *samples = malloc(MAX_BYTES);
    if (samples == NULL) return 1;
    while (fgets(line, sizeof line, stdin) != NULL) {
        char *end = NULL;
        long bytes = strtol(line, &end, 10);
        if (end == line || bytes < 0 || bytes > MAX_BYTES || bytes % 2 != 0) {
            answer_error("bad request: expected a byte count line (even, at most 8 MiB)");
            return 2;
        }
        if (bytes > 0 && fread(samples, 1, (size_t)bytes, stdin) != (size_t)bytes) {
            answer_error("bad request: the recording ended early");
            return 2;
        }
        if (ps_start_utt(decoder) < 0 || ps_process_raw(decoder, samples, (size_t)bytes / 2, FALSE, TRUE) < 0 || ps_end_utt(decoder) < 0) {
            answer_error("pocketsphinx could not decode the recording");
            continue;
        }
        int32 score = 0;
        const char *hyp = ps_get_hyp(decoder, &score);
        fputs("{\"text\":", stdout);
        put_json_string(hyp ? hyp : "");
        fputs("}\n", stdout);
        fflush(stdout);
    }
    free(samples);
    ps_free(decoder);
    cmd_ln_free_r(config);
    return 0;
}
