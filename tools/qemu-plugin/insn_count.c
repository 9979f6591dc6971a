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
 * Arguments: base=<hex address>, size=<bytes>, name=<file name>, and
 * optionally ctx=<path>: a file of one byte per counter, the context
 * (machine and offload, numbered by the reader; 0: none) of the code at
 * each address. With it the plugin also keeps a shadow call stack (a
 * translation block ending in a call pushes its return address, one
 * starting at the top's return address pops it) and charges every block
 * to the context of its own code, or where that is 0 to the innermost
 * caller's that is not 0: out-of-line helpers (memcpy, an accessor) are
 * charged to the machine that called them. Those sums, 256 u64 by
 * context, follow the per-address counters in the file.
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
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
extern void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb,
                                                 qemu_plugin_vcpu_udata_cb_t cb,
                                                 enum qemu_plugin_cb_flags flags, void *userdata);
extern const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
extern size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
#define EXPORT __attribute__((visibility("default")))
EXPORT int qemu_plugin_version = 1;
/* ---- end of the API ---- */

static uint64_t base, size;
static uint64_t *counts;

/* Contexts: one byte per counter (NULL: no context table), and the sums
 * by context after the counters. */
static uint8_t *ctx_of;
static uint64_t *ctx_sums;

struct block {
    uint64_t start;
    uint64_t n;
    /* The return address of the call that ends the block, or 0. */
    uint64_t ret;
};

#define DEPTH 512
static struct {
    uint64_t ret;
    uint8_t ctx;
} stack[DEPTH];
static int sp;

/* Does this instruction call (link in ra)? jal/jalr with rd = x1, or
 * c.jalr. */
static int is_call(const uint8_t *b, size_t len)
{
    if (len == 4) {
        uint32_t i = b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
        uint32_t op = i & 0x7f, rd = (i >> 7) & 0x1f;
        return (op == 0x6f || op == 0x67) && rd == 1;
    }
    if (len == 2) {
        uint16_t i = b[0] | b[1] << 8;
        return (i & 0xf07f) == 0x9002 && ((i >> 7) & 0x1f) != 0;
    }
    return 0;
}

static void on_block(unsigned int vcpu, void *udata)
{
    (void)vcpu;
    struct block *b = udata;
    /* A return: pop to the frame it returns to (a frame or more whose
     * return never came, as after a reset, go with it). */
    for (int k = sp - 1; k >= 0 && k >= sp - 8; k--) {
        if (stack[k].ret == b->start) {
            sp = k;
            break;
        }
    }
    uint8_t own = ctx_of[(b->start - base) / 2];
    uint8_t c = own ? own : (sp > 0 ? stack[sp - 1].ctx : 0);
    ctx_sums[c] += b->n;
    if (b->ret) {
        if (sp == DEPTH)
            sp = 0;
        stack[sp].ret = b->ret;
        stack[sp].ctx = c;
        sp++;
    }
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    uint64_t first = 0, ret = 0;
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t pc = qemu_plugin_insn_vaddr(insn);
        if (i == 0)
            first = pc;
        if (pc >= base && pc - base < size) {
            qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64,
                                                       &counts[(pc - base) / 2], 1);
        }
        if (i == n - 1 && is_call(qemu_plugin_insn_data(insn), qemu_plugin_insn_size(insn)))
            ret = pc + qemu_plugin_insn_size(insn);
    }
    if (ctx_of && n > 0 && first >= base && first - base < size) {
        struct block *b = malloc(sizeof *b);
        if (!b)
            return;
        b->start = first;
        b->n = n;
        b->ret = ret;
        qemu_plugin_register_vcpu_tb_exec_cb(tb, on_block, QEMU_PLUGIN_CB_NO_REGS, b);
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
    const char *ctx_path = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "base=", 5))
            base = strtoull(argv[i] + 5, NULL, 0);
        else if (!strncmp(argv[i], "size=", 5))
            size = strtoull(argv[i] + 5, NULL, 0);
        else if (!strncmp(argv[i], "name=", 5))
            name = argv[i] + 5;
        else if (!strncmp(argv[i], "ctx=", 4))
            ctx_path = argv[i] + 4;
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
    size_t slots = size / 2;
    size_t bytes = slots * sizeof(uint64_t) + 256 * sizeof(uint64_t);
    if (ctx_path) {
        ctx_of = calloc(slots, 1);
        int cf = open(ctx_path, O_RDONLY);
        if (!ctx_of || cf < 0 || read(cf, ctx_of, slots) != (ssize_t)slots) {
            fprintf(stderr, "insn_count: cannot read %zu context bytes from %s\n", slots, ctx_path);
            return -1;
        }
        close(cf);
    }
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
    ctx_sums = counts + slots;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    return 0;
}
