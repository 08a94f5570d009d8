/* vmm: the domain XML of a guest (vmm_domain_xml) and the sandbox id read
 * back out of a domain's metadata. See docs/vmm.md for the choices. */
#include "vmm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "vmm-priv.h"

#define VMM_XML_MAX (64 * 1024)
/* The CPU bound's accounting period (cgroup cpu.cfs_period_us): 100 ms,
 * the kernel's default. */
#define VMM_CPU_PERIOD_US 100000u

/* Printable ASCII only (what we put in XML text must be valid XML 1.0 and
 * a sandbox id must survive a round trip through libvirt unchanged). */
bool vmm_text_valid(const char *s, size_t max)
{
	size_t n = 0;
	for (; s[n]; n++) {
		unsigned char c = (unsigned char)s[n];
		if (c < 0x20 || c > 0x7e || n >= max)
			return false;
	}
	return true;
}

/* Append s to b with the five XML special characters escaped. */
int vmm_xml_escape(struct sbx_buf *b, const char *s)
{
	const char *run = s;
	for (const char *p = s;; p++) {
		const char *ent = NULL;
		switch (*p) {
		case '&':
			ent = "&amp;";
			break;
		case '<':
			ent = "&lt;";
			break;
		case '>':
			ent = "&gt;";
			break;
		case '\'':
			ent = "&apos;";
			break;
		case '"':
			ent = "&quot;";
			break;
		case '\0':
			break;
		default:
			continue;
		}
		if (p > run && sbx_buf_append(b, run, (size_t)(p - run)) < 0)
			return -1;
		if (!*p)
			return 0;
		if (sbx_buf_append(b, ent, strlen(ent)) < 0)
			return -1;
		run = p + 1;
	}
}

/* ---------------------------------------------------------- domain XML */

/* The name, metadata, memory, vCPUs and the direct kernel boot. */
static int vmm_xml_os(struct sbx_buf *b, const struct vmm_config *cfg, const char *name,
		      const struct vmm_guest_spec *spec, const char *virt_type, bool disk)
{
	int r = 0;

	r |= sbx_buf_printf(b, "<domain type='%s'>\n  <name>", virt_type);
	r |= vmm_xml_escape(b, name);
	r |= sbx_buf_printf(b, "</name>\n");
	if (spec->sandbox_id && spec->sandbox_id[0]) {
		r |= sbx_buf_printf(b, "  <metadata>\n    <sbx:sandbox xmlns:sbx='%s'><sbx:id>",
				    VMM_METADATA_NS);
		r |= vmm_xml_escape(b, spec->sandbox_id);
		r |= sbx_buf_printf(b, "</sbx:id></sbx:sandbox>\n  </metadata>\n");
	}
	r |= sbx_buf_printf(b,
			    "  <memory unit='MiB'>%llu</memory>\n"
			    "  <vcpu>%u</vcpu>\n"
			    "  <os>\n"
			    "    <type arch='x86_64' machine='pc'>hvm</type>\n"
			    "    <kernel>",
			    (unsigned long long)spec->memory_mib, spec->vcpus ? spec->vcpus : 1);
	r |= vmm_xml_escape(b, cfg->kernel ? cfg->kernel : "");
	r |= sbx_buf_printf(b, "</kernel>\n");
	if (cfg->initrd && cfg->initrd[0]) {
		r |= sbx_buf_printf(b, "    <initrd>");
		r |= vmm_xml_escape(b, cfg->initrd);
		r |= sbx_buf_printf(b, "</initrd>\n");
	}
	/* swiotlb=noforce: a guest with memory above 4 GiB otherwise zeroes a
	 * 64 MiB bounce buffer at boot (62 MiB of RSS per idle 4 GiB guest)
	 * that no device of ours uses: virtio without ACCESS_PLATFORM does not
	 * go through the DMA API (docs/benchmarks.md, bench/density). */
	r |= sbx_buf_printf(b, "    <cmdline>console=ttyS0 panic=-1 rdinit=/init quiet "
			       "swiotlb=noforce");
	if (cfg->cmdline && cfg->cmdline[0]) {
		r |= sbx_buf_printf(b, " ");
		r |= vmm_xml_escape(b, cfg->cmdline);
	}
	/* The guest init mounts the root disk, grows it and switches to it. */
	if (disk)
		r |= sbx_buf_printf(b, " sandboxd.root=/dev/vda");
	r |= sbx_buf_printf(b, "</cmdline>\n  </os>\n");
	return r;
}

/* ACPI, the TCG translation cache, the CPU model and the CPU bound. */
static int vmm_xml_cpu(struct sbx_buf *b, const struct vmm_config *cfg, bool kvm)
{
	int r = 0;

	/* ACPI stays on: without it Debian's cloud kernel (no MP-table
	 * support) finds no APIC and brings up one vCPU whatever the size
	 * asks for; that costs ~0.4 s of boot under TCG (docs/vmm.md). */
	r |= sbx_buf_printf(b, "  <features>\n    <acpi/>\n");
	if (!kvm && cfg->tb_cache_mib > 0)
		r |= sbx_buf_printf(b, "    <tcg><tb-cache unit='MiB'>%u</tb-cache></tcg>\n",
				    cfg->tb_cache_mib);
	r |= sbx_buf_printf(b, "  </features>\n");
	if (kvm)
		r |= sbx_buf_printf(b, "  <cpu mode='host-passthrough' check='none'/>\n");
	else
		r |= sbx_buf_printf(b, "  <cpu mode='custom' match='exact' check='none'>"
				       "<model fallback='forbid'>qemu64</model></cpu>\n");
	/* The CPU bound (vmm.h, host_cpus): a guest, whatever it runs or
	 * sends, always leaves one CPU to the rest of the host (the daemon,
	 * libvirtd and the other guests). It only holds a guest that keeps
	 * more than host_cpus - 1 CPUs busy: one busy vCPU on a 2-CPU host
	 * (a boot, an exec) fits. */
	if (cfg->host_cpus >= 2)
		r |= sbx_buf_printf(b,
				    "  <cputune>\n"
				    "    <global_period>%u</global_period>\n"
				    "    <global_quota>%llu</global_quota>\n"
				    "  </cputune>\n",
				    VMM_CPU_PERIOD_US,
				    (unsigned long long)(cfg->host_cpus - 1) * VMM_CPU_PERIOD_US);
	return r;
}

/* The disk, serial console, exec channel, balloon and entropy devices. */
static int vmm_xml_devices(struct sbx_buf *b, const struct vmm_config *cfg, const char *name,
			   const struct vmm_guest_spec *spec, bool disk)
{
	int r = 0;
	const char *run = cfg->run_dir ? cfg->run_dir : "";
	bool remote = cfg->uri && !vmm_uri_is_local(cfg->uri);

	if (disk) {
		r |= sbx_buf_printf(
		    b, "    <disk type='file' device='disk'>\n"
		       "      <driver name='qemu' type='qcow2' error_policy='report'/>\n"
		       "      <source file='");
		r |= vmm_xml_escape(b, run);
		r |= sbx_buf_printf(b, "/");
		r |= vmm_xml_escape(b, name);
		/* The shared base is read-only and never relabelled per domain. */
		r |= sbx_buf_printf(b, ".qcow2'/>\n");
		if (spec->snapshot_id && spec->snapshot_id[0]) {
			/* A template (vmm/snapshot.c): the snapshot's file
			 * between the overlay and the base, shared read-only
			 * by every guest made from it; libvirt labels it. */
			r |= sbx_buf_printf(b, "      <backingStore type='file'>\n"
					       "        <format type='qcow2'/>\n"
					       "        <source file='");
			r |= vmm_xml_escape(b, run);
			r |= sbx_buf_printf(b, "/");
			r |= vmm_xml_escape(b, spec->snapshot_id);
			r |= sbx_buf_printf(b, ".qcow2'/>\n");
		}
		r |= sbx_buf_printf(b, "      <backingStore type='file'>\n"
				       "        <format type='qcow2'/>\n"
				       "        <source file='");
		r |= vmm_xml_escape(b, cfg->base_image);
		r |= sbx_buf_printf(b, "'>\n          <seclabel model='dac' relabel='no'/>\n"
				       "        </source>\n"
				       "        <backingStore/>\n"
				       "      </backingStore>\n");
		if (spec->snapshot_id && spec->snapshot_id[0])
			r |= sbx_buf_printf(b, "      </backingStore>\n");
		r |= sbx_buf_printf(b, "      <target dev='vda' bus='virtio'/>\n"
				       "    </disk>\n");
	}
	r |= sbx_buf_printf(b, "    <controller type='usb' model='none'/>\n"
			       "    <controller type='virtio-serial' index='0'/>\n"
			       "    <serial type='file'>\n      <source path='");
	r |= vmm_xml_escape(b, run);
	r |= sbx_buf_printf(b, "/");
	r |= vmm_xml_escape(b, name);
	r |= sbx_buf_printf(b, ".console.log' append='off'/>\n"
			       "      <target port='0'/>\n"
			       "    </serial>\n"
			       "    <channel type='unix'>\n");
	/* A remote host's channel is reached only as a libvirt stream: let
	 * libvirt pick the socket path there. */
	if (!remote) {
		r |= sbx_buf_printf(b, "      <source mode='bind' path='");
		r |= vmm_xml_escape(b, run);
		r |= sbx_buf_printf(b, "/");
		r |= vmm_xml_escape(b, name);
		r |= sbx_buf_printf(b, ".sock'/>\n");
	}
	r |= sbx_buf_printf(b,
			    "      <target type='virtio' name='%s'/>\n"
			    "    </channel>\n"
			    "    <video><model type='none'/></video>\n",
			    VMM_PORT_NAME);
	/* Free page reporting: the guest's virtio_balloon driver hands 2 MiB
	 * blocks it freed back to the host (QEMU discards them), so a guest
	 * that once used 1 GiB idles at its boot footprint again. The host
	 * never sets a balloon target: it is no way to take memory from a
	 * guest (docs/vmm.md, bench/density). */
	if (cfg->free_page_reporting && cfg->balloon_stats_period_s)
		/* ... and, every period, the guest's own memory figures (the
		 * sandbox's metrics: shown as the guest's word, never billed) */
		r |= sbx_buf_printf(b,
				    "    <memballoon model='virtio' freePageReporting='on'>\n"
				    "      <stats period='%u'/>\n"
				    "    </memballoon>\n",
				    cfg->balloon_stats_period_s);
	else if (cfg->free_page_reporting)
		r |= sbx_buf_printf(b, "    <memballoon model='virtio' freePageReporting='on'/>\n");
	else
		r |= sbx_buf_printf(b, "    <memballoon model='none'/>\n");
	/* Entropy from the host's /dev/urandom (rate-limited): a TCG guest
	 * has no RDRAND and no other entropy source, and its kernel's random
	 * pool took 8-23 s after boot to get ready, which node and anything
	 * else reading getrandom() early waited for. */
	r |= sbx_buf_printf(b, "    <rng model='virtio'>\n"
			       "      <rate bytes='65536' period='1000'/>\n"
			       "      <backend model='random'>/dev/urandom</backend>\n"
			       "    </rng>\n");
	return r;
}

/* Tags every xml string needs, with the config filled in. */
static int vmm_xml_build(struct sbx_buf *b, const struct vmm_config *cfg, const char *name,
			 const struct vmm_guest_spec *spec, const char *virt_type, bool kvm)
{
	int r = 0;
	bool disk = cfg->base_image && cfg->base_image[0] && spec->disk_gib > 0;

	r |= vmm_xml_os(b, cfg, name, spec, virt_type, disk);
	r |= vmm_xml_cpu(b, cfg, kvm);
	r |= sbx_buf_printf(b, "  <clock offset='utc'/>\n"
			       "  <on_poweroff>destroy</on_poweroff>\n"
			       "  <on_reboot>destroy</on_reboot>\n"
			       "  <on_crash>destroy</on_crash>\n"
			       "  <devices>\n");
	r |= vmm_xml_devices(b, cfg, name, spec, disk);
	r |= sbx_buf_printf(b, "  </devices>\n</domain>\n");
	return r ? -1 : 0;
}

char *vmm_domain_xml_typed(const struct vmm_config *cfg, const char *name,
			   const struct vmm_guest_spec *spec, const char *virt_type, bool kvm)
{
	if (!cfg || !spec || !vmm_name_valid(name))
		return NULL;
	if (spec->sandbox_id && !vmm_text_valid(spec->sandbox_id, VMM_ID_MAX))
		return NULL;
	if (cfg->cmdline && !vmm_text_valid(cfg->cmdline, 2048))
		return NULL;
	if (spec->memory_mib == 0)
		return NULL;
	struct sbx_buf b;
	sbx_buf_init(&b, VMM_XML_MAX);
	if (vmm_xml_build(&b, cfg, name, spec, virt_type, kvm) < 0) {
		sbx_buf_release(&b);
		return NULL;
	}
	return sbx_buf_steal(&b, NULL);
}

char *vmm_domain_xml(const struct vmm_config *cfg, const char *name,
		     const struct vmm_guest_spec *spec, bool kvm)
{
	return vmm_domain_xml_typed(cfg, name, spec, kvm ? "kvm" : "qemu", kvm);
}

/* ------------------------------------------------------------ metadata */

int vmm_priv_metadata_id(const char *xml, char *out, size_t outlen)
{
	if (!xml || outlen == 0)
		return -1;
	/* The element is <id> or <prefix:id>; libvirt reformats the prefix. */
	const char *p = xml, *start = NULL;
	while ((p = strchr(p, '<'))) {
		p++;
		const char *q = p;
		while (*q && *q != '>' && *q != ':' && *q != ' ' && *q != '/')
			q++;
		const char *local = (*q == ':') ? q + 1 : p;
		if (strncmp(local, "id>", 3) == 0) {
			start = local + 3;
			break;
		}
	}
	if (!start)
		return -1;
	const char *end = strchr(start, '<');
	if (!end)
		return -1;
	size_t o = 0;
	for (const char *s = start; s < end;) {
		char c = *s;
		size_t adv = 1;
		if (c == '&') {
			static const struct {
				const char *ent;
				char c;
			} ents[] = {{"&amp;", '&'},
				    {"&lt;", '<'},
				    {"&gt;", '>'},
				    {"&apos;", '\''},
				    {"&quot;", '"'}};
			bool found = false;
			for (size_t i = 0; i < SBX_ARRAY_SIZE(ents); i++) {
				size_t n = strlen(ents[i].ent);
				if ((size_t)(end - s) >= n && strncmp(s, ents[i].ent, n) == 0) {
					c = ents[i].c;
					adv = n;
					found = true;
					break;
				}
			}
			if (!found && s[1] == '#') {
				char *e = NULL;
				long cp =
				    (s[2] == 'x') ? strtol(s + 3, &e, 16) : strtol(s + 2, &e, 10);
				if (!e || e >= end || *e != ';' || cp < 0x20 || cp > 0x7e)
					return -1;
				c = (char)cp;
				adv = (size_t)(e + 1 - s);
			} else if (!found) {
				return -1;
			}
		}
		if (o + 1 >= outlen)
			return -1;
		out[o++] = c;
		s += adv;
	}
	out[o] = '\0';
	return 0;
}
