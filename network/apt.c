/* network/apt.c: the hostnames of the host's apt sources, for the
 * development default policy (docs/network.md "Development default").
 */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "network.h"

/* The host of one URI ("http://deb.debian.org/debian", "https://u:p@h:8080/x")
 * added to out when new; "file:", "cdrom:" and the like have none. */
static void add_uri(const char *uri, char (*out)[NET_NAME_MAX], size_t cap, size_t *n)
{
	const char *h, *end;
	char host[NET_NAME_MAX], norm[NET_NAME_MAX];
	size_t len;

	if (strncmp(uri, "http://", 7) == 0)
		h = uri + 7;
	else if (strncmp(uri, "https://", 8) == 0)
		h = uri + 8;
	else
		return;
	end = h + strcspn(h, "/ \t\r\n");
	for (const char *at = h; at < end; at++)
		if (*at == '@')
			h = at + 1; /* user:password@ */
	len = strcspn(h, ":/ \t\r\n");
	if (h + len > end)
		len = (size_t)(end - h);
	if (len == 0 || len >= sizeof(host))
		return;
	memcpy(host, h, len);
	host[len] = '\0';
	if (net_name_normalize(host, norm) < 0)
		return;
	for (size_t i = 0; i < *n; i++)
		if (strcmp(out[i], norm) == 0)
			return;
	if (*n < cap)
		snprintf(out[(*n)++], NET_NAME_MAX, "%s", norm);
}

/* Every URI on one line: after "URIs:" (deb822) or after "deb"/"deb-src"
 * and an optional "[options]" (one-line format). */
static void scan_line(char *line, bool deb822, char (*out)[NET_NAME_MAX], size_t cap, size_t *n)
{
	char *p = line, *tok, *save = NULL;

	while (*p == ' ' || *p == '\t')
		p++;
	if (deb822) {
		if (strncasecmp(p, "URIs:", 5) != 0)
			return;
		p += 5;
	} else {
		if (strncmp(p, "deb ", 4) == 0)
			p += 4;
		else if (strncmp(p, "deb-src ", 8) == 0)
			p += 8;
		else
			return;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '[') {
			char *rb = strchr(p, ']');
			if (!rb)
				return;
			p = rb + 1;
		}
	}
	for (tok = strtok_r(p, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
		add_uri(tok, out, cap, n);
		if (!deb822)
			break; /* one URI, then the suite */
	}
}

static void scan_file(const char *path, bool deb822, char (*out)[NET_NAME_MAX], size_t cap,
		      size_t *n)
{
	FILE *f = fopen(path, "re");
	char line[1024];

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		scan_line(line, deb822, out, cap, n);
	fclose(f);
}

size_t net_apt_hosts(const char *dir, const char *list_file, char (*out)[NET_NAME_MAX], size_t cap)
{
	size_t n = 0;
	DIR *d = dir ? opendir(dir) : NULL;
	struct dirent *e;
	char path[1024];

	while (d && (e = readdir(d))) {
		size_t len = strlen(e->d_name);

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (len > 8 && strcmp(e->d_name + len - 8, ".sources") == 0)
			scan_file(path, true, out, cap, &n);
		else if (len > 5 && strcmp(e->d_name + len - 5, ".list") == 0)
			scan_file(path, false, out, cap, &n);
	}
	if (d)
		closedir(d);
	if (list_file)
		scan_file(list_file, false, out, cap, &n);
	return n;
}
