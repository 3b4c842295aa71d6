/*
 * What a fuzz target (fuzz/fuzz_NAME.c) provides: libFuzzer's entry point,
 * and for the plain driver (fuzz/driver.c, linked in place of libFuzzer)
 * its name, the report of the input being run when the process dies, and
 * a summary of what the inputs checked.
 */
#ifndef SINPE_FUZZ_TARGET_H
#define SINPE_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

extern const char fuzz_target_name[];
void fuzz_report_input(void);
void fuzz_print_summary(long runs, double seconds);

#endif /* SINPE_FUZZ_TARGET_H */
