/* What the benchmarks share: order statistics of a sample and integer
 * knobs from the environment. Header-only; each bench includes it once.
 * Benchmarks print figures and never fail on them (STYLE.md). */
#ifndef SBX_BENCH_H
#define SBX_BENCH_H

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

static inline int bench_cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Median, p95 (nearest rank), min and max of n samples (any unit). */
struct stats {
	int64_t median, p95, min, max;
	int n;
};

/* Sorts v in place. n <= 0 gives all zeros. */
static inline struct stats stats_of(int64_t *v, int n)
{
	struct stats s = {0};
	int i95;

	if (n <= 0)
		return s;
	qsort(v, (size_t)n, sizeof(*v), bench_cmp_i64);
	s.n = n;
	s.min = v[0];
	s.max = v[n - 1];
	s.median = v[n / 2];
	i95 = (n * 95 + 99) / 100 - 1;
	s.p95 = v[i95 < 0 ? 0 : i95 >= n ? n - 1 : i95];
	return s;
}

/* A positive integer from the environment, at most max, else def. */
static inline int env_int_max(const char *name, int def, long max)
{
	const char *s = getenv(name);
	long v;

	if (!s || !*s)
		return def;
	v = strtol(s, NULL, 10);
	return v > 0 && v <= max ? (int)v : def;
}

#endif
