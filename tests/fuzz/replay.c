/* Replays a fuzz target's corpus without libFuzzer, so `make test` runs
 * every checked-in input (crun, lwan and h2o do the same).
 *   build/tests/fuzz_NAME tests/fuzz/corpus/NAME
 * Exit 0 when every file ran (a crash or sanitizer report fails it). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
	struct dirent **names;
	char path[4096];
	int n, ran = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	n = scandir(argv[1], &names, NULL, alphasort);
	if (n < 0) {
		perror(argv[1]);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		size_t len = 0;
		char *data;

		if (names[i]->d_name[0] == '.') {
			free(names[i]);
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", argv[1], names[i]->d_name);
		free(names[i]);
		data = sbx_read_file(path, 16 * 1024 * 1024, &len);
		if (!data) {
			perror(path);
			return 1;
		}
		LLVMFuzzerTestOneInput((const uint8_t *)data, len);
		free(data);
		ran++;
	}
	free(names);
	printf("%d passed, 0 failed\n", ran);
	return ran > 0 ? 0 : 1;
}
