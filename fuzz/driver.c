/*
 * The plain fuzz driver (no libFuzzer; what CI runs, with gcc): linked with
 * a target (fuzz/fuzz_target.h), it replays the files given, or runs random
 * inputs of up to 256 bytes from a seeded generator for SECONDS:
 *
 *   ./fuzz_NAME SECONDS [SEED]     (default 60 s, seed 1)
 *   ./fuzz_NAME FILE...            (a crash input libFuzzer wrote, say)
 *
 * A sanitizer's report, or an abort, is about the library: the target then
 * says which input made it (libFuzzer writes the input to a file itself).
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fuzz_random.h"
#include "fuzz_target.h"

void __sanitizer_set_death_callback(void (*callback)(void)); /* sanitizer/common_interface_defs.h */

static void report_on_abort(int signal_number)
{
    fuzz_report_input(); /* not async-signal-safe, but the process is dying anyway */
    signal(signal_number, SIG_DFL);
    raise(signal_number);
}

/* Replay when the first argument is a file (corpus files are often named
 * by a hash that starts with a digit), else SECONDS [SEED]. */
static int is_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f != NULL) fclose(f);
    return f != NULL;
}

int main(int argc, char **argv)
{
    /* ASan calls the death callback; gcc's UBSan runtime does not, but
     * aborts when told to (fuzz/run.sh: abort_on_error=1). */
#if defined(__SANITIZE_ADDRESS__)
    __sanitizer_set_death_callback(fuzz_report_input);
#endif
    signal(SIGABRT, report_on_abort);
    if (argc > 1 && is_file(argv[1])) {
        for (int i = 1; i < argc; ++i) {
            FILE *f = fopen(argv[i], "rb");
            if (f == NULL) { perror(argv[i]); exit(2); }
            uint8_t input[4096];
            const size_t got = fread(input, 1, sizeof input, f);
            fclose(f);
            LLVMFuzzerTestOneInput(input, got);
        }
        printf("%s: %d inputs replayed, no failure\n", fuzz_target_name, argc - 1);
        return 0;
    }
    const double seconds = argc > 1 ? atof(argv[1]) : 60.0;
    uint64_t state = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
    const time_t start = time(NULL);
    long runs = 0;
    uint8_t input[256];
    while (difftime(time(NULL), start) < seconds) {
        const size_t length = 16 + splitmix(&state) % (sizeof input - 16);
        for (size_t i = 0; i < length; ++i) input[i] = (uint8_t)splitmix(&state);
        LLVMFuzzerTestOneInput(input, length);
        ++runs;
    }
    fuzz_print_summary(runs, seconds);
    return 0;
}
