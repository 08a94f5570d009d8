/* Fuzz target: the guest init's side of the channel. Arbitrary bytes from
 * a (hostile or broken) host go through the guest's frame reassembly and
 * EXEC payload decoding (guest/serve.c and guest/spawn.c built with
 * SBX_GUEST_FUZZ, which starts no process and writes nothing). */
#include <stddef.h>
#include <stdint.h>

#include "guest/init.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	guest_fuzz_input(data, size);
	return 0;
}

/* init.c's services, which serve.c uses (init.c itself has main()). */
char guest_cgroup_root[64];

void guest_log(const char *fmt, ...)
{
	(void)fmt;
}

int64_t guest_mono_ms(void)
{
	return 0;
}

int64_t guest_boot_ms(void)
{
	return 0;
}
