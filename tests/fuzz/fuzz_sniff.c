/* Fuzz target: the first client bytes of a guest's connection
 * (network/sniff.c). Any bytes: the parser stays in bounds, a name it
 * returns is normalized (net_name_normalize gives it back unchanged) and
 * every prefix of the input reads as MORE or as the same kind of answer
 * it gives on the whole, never a name the whole does not give. Then the
 * input as a policy's JSON (network/policy.c): parsed or refused, and
 * what parses writes back to JSON that parses to the same. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "network/network.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void policy_roundtrip(const uint8_t *data, size_t size)
{
	static struct net_policy p, q;
	static char a[NET_POLICY_JSON_MAX], b[NET_POLICY_JSON_MAX];
	struct sbx_error err = {0};

	if (net_policy_parse((const char *)data, size, "network", NULL, &p, &err) < 0)
		return;
	if (net_policy_json(&p, a, sizeof(a)) < 0)
		abort(); /* a parsed policy always fits */
	if (net_policy_parse(a, strlen(a), "network", NULL, &q, &err) < 0)
		abort();
	if (net_policy_json(&q, b, sizeof(b)) < 0 || strcmp(a, b) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char name[NET_NAME_MAX], norm[NET_NAME_MAX], pname[NET_NAME_MAX];
	struct net_range lit;
	enum net_sniff whole = net_sniff(data, size, name), part;

	if (whole == NET_SNIFF_NAME && net_addr_parse(name, &lit) < 0 &&
	    (net_name_normalize(name, norm) < 0 || strcmp(norm, name) != 0))
		abort();
	if (size > 1) {
		part = net_sniff(data, size / 2, pname);
		if (part == NET_SNIFF_NAME && whole == NET_SNIFF_NAME && strcmp(pname, name) != 0)
			abort();
	}
	(void)net_sniff_decide(data, size, "allowed.lab.test");
	policy_roundtrip(data, size);
	return 0;
}
