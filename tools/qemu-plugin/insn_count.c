/*
 * insn_count: a QEMU TCG plugin that counts the guest instructions
 * executed at each address of a range, for `cargo xtask bench --firmware`
 * (xtask/src/fwbench/profile.rs). Every instruction in the range gets an
 * inline "add 1" on its own 64-bit counter, so the counts are exact and
 * cost no callback.
 *
 * The counters live in a file the plugin creates and maps shared, beside
 * the node's RAM file: the directory of the `mem-path=` of QEMU's own
 * command line (a cluster node's directory), named by the argument
 * `name=`. A reader maps or reads the file at any moment; two readings
 * subtracted are the instructions run in between, at each address.
 * Layout: counter i (little-endian u64 at byte 8 i) counts the
 * instructions at address base + 2 i (RISC-V's compressed instructions
 * are 2 bytes long).
 *
 * Arguments: base=<hex address>, size=<bytes>, name=<file name>.
 *
 * QEMU (Debian's 7.2) is built with plugin support but ships no
 * qemu-plugin.h: the few declarations of its plugin API (version 1)
 * used here are written out below.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- the QEMU plugin API (version 1), as documented ---- */
typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
typedef struct qemu_info_t qemu_info_t;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
extern void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
                                                  qemu_plugin_vcpu_tb_trans_cb_t cb);
extern size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
extern struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb,
                                                        size_t idx);
extern uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
extern void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn,
                                                       enum qemu_plugin_op op, void *ptr,
                                                       uint64_t imm);
#define EXPORT __attribute__((visibility("default")))
EXPORT int qemu_plugin_version = 1;
/* ---- end of the API ---- */

static uint64_t base, size;
static uint64_t *counts;

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t pc = qemu_plugin_insn_vaddr(insn);
        if (pc >= base && pc - base < size) {
            qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64,
                                                       &counts[(pc - base) / 2], 1);
        }
    }
}

/* The directory of `mem-path=` on this process's command line. */
static int node_dir(char *out, size_t cap)
{
    static char cmd[1 << 16];
    int fd = open("/proc/self/cmdline", O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t len = read(fd, cmd, sizeof cmd - 1);
    close(fd);
    if (len <= 0)
        return -1;
    cmd[len] = 0;
    for (ssize_t at = 0; at < len; at += strlen(cmd + at) + 1) {
        char *p = strstr(cmd + at, "mem-path=");
        if (!p)
            continue;
        p += strlen("mem-path=");
        size_t n = strcspn(p, ",");
        char *slash = memrchr(p, '/', n);
        if (!slash || (size_t)(slash - p) + 1 > cap)
            return -1;
        memcpy(out, p, slash - p);
        out[slash - p] = 0;
        return 0;
    }
    return -1;
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                               char **argv)
{
    (void)info;
    const char *name = "insn-counts";
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "base=", 5))
            base = strtoull(argv[i] + 5, NULL, 0);
        else if (!strncmp(argv[i], "size=", 5))
            size = strtoull(argv[i] + 5, NULL, 0);
        else if (!strncmp(argv[i], "name=", 5))
            name = argv[i] + 5;
        else {
            fprintf(stderr, "insn_count: unknown argument %s\n", argv[i]);
            return -1;
        }
    }
    if (size == 0 || size > (64u << 20) || strchr(name, '/')) {
        fprintf(stderr, "insn_count: say base=, size= (at most 64 MiB) and a plain name=\n");
        return -1;
    }
    char path[4096];
    if (node_dir(path, sizeof path - 256) != 0) {
        fprintf(stderr, "insn_count: no mem-path= on the command line\n");
        return -1;
    }
    strcat(path, "/");
    strcat(path, name);
    size_t bytes = (size / 2) * sizeof(uint64_t);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0) {
        perror("insn_count: creating the counters file");
        return -1;
    }
    counts = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (counts == MAP_FAILED) {
        perror("insn_count: mapping the counters file");
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    return 0;
}
