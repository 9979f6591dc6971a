/*
 * gm_get: remote reads (gm_get) from another process's memory, in the
 * manner of GM's own tests. Written only against GM's interface (gm.h);
 * every byte of the reader's region is checked after every get, those
 * the get wrote and those it must have left alone.
 *
 * Run one process on each of two nodes (NIC_CLUSTER and NIC_NODE say
 * which):
 *
 *   gm_get [-p port] [-t seconds]
 *
 * The process with node id 2 fills a region of its DMA memory with a
 * pattern and sends the region's address (8 bytes, network order) to
 * node id 1. Node id 1 reads ranges of it into its own DMA memory with
 * gm_get: first one at a time, checking its whole region after each
 * completion, then several at once, checking each range as its
 * completion comes and the whole region after the last. A final message
 * tells node id 2 to check that its region is as it was and to exit.
 * Node id 1 prints "gm_get: N bytes got intact in K gets". Exit status 0
 * when all is right, 1 if not (with the reason on stderr).
 *
 * -t bounds the whole run: a process still waiting after that many
 * seconds says what it was waiting for and exits 1.
 */

#include <stdio.h>
#include <stdlib.h>

#include "gm.h"
#include "gm_test.h"

#define REMOTE 65536ul /* node id 2's region */
#define LOCAL 70000ul  /* node id 1's */

/* The program, its port and its peer (gm_test.h). Messages come only
   when it waits for one: any other is a failure (gmt_unasked). */
static struct gmt prog = {.name = "gm_get", .port_id = 2, .waiting_for = "the start",
                          .handle_event = gmt_unasked};

/* ---- patterns ---- */

/* What node id 2's region holds at offset i. */
static unsigned char source_byte(unsigned long i)
{
  return (unsigned char)((i * 131 + (i >> 8) * 17 + 5) ^ 0x3c);
}

/* What node id 1's region holds before the gets. */
static unsigned char local_background(unsigned long i)
{
  return (unsigned char)(i * 11 + 200);
}

/* ---- the gets ---- */

/* Ranges read from node id 2's region (at `remote`) into node id 1's
   (at `local`), at other offsets than they come from so that a get
   that confuses the two shows: short and long, within a packet and
   across several (the NIC's MTU is 4096 bytes), the region's first and
   last byte; two at high priority. The `together` ones are issued all
   at once; their local ranges do not overlap any other. */
static struct range {
  unsigned long remote, local, len;
  int together, high;
  int calls; /* completions reported */
  gm_status_t status;
} ranges[] = {
    {0, 7, 1, 0, 0, 0, GM_SUCCESS},
    {1, 100, 7, 0, 1, 0, GM_SUCCESS},
    {64, 4000, 4096, 0, 0, 0, GM_SUCCESS},
    {9000, 8200, 4097, 0, 0, 0, GM_SUCCESS},
    {13001, 12400, 20000, 0, 0, 0, GM_SUCCESS},
    {40000, 33000, 25536, 0, 0, 0, GM_SUCCESS},
    {20000, 59000, 3000, 1, 0, 0, GM_SUCCESS},
    {100, 62500, 1000, 1, 1, 0, GM_SUCCESS},
    {65535, 63600, 1, 1, 0, 0, GM_SUCCESS},
    {30000, 64000, 1500, 1, 0, 0, GM_SUCCESS},
    {2, 65600, 4096, 1, 0, 0, GM_SUCCESS},
};
#define NRANGES ((int)(sizeof ranges / sizeof ranges[0]))

/* ---- node id 1: the gets ---- */

static gm_remote_ptr_t remote; /* node id 2's region, as it sent it */
static unsigned char *dst;     /* the region the gets write */
static unsigned char *shadow;  /* what it should hold */
static int gets_pending;

/* Compare `dst` with `shadow` over [from, to); the bytes wrong. */
static unsigned long compare(unsigned long from, unsigned long to, const char *after)
{
  unsigned long i, wrong = 0;
  for (i = from; i < to; i++)
    if (dst[i] != shadow[i]) {
      if (wrong < 10)
        fprintf(stderr, "gm_get: after %s: local byte %lu is %u, not %u\n", after, i, dst[i],
                shadow[i]);
      wrong++;
    }
  if (wrong)
    prog.failures++;
  return wrong;
}

static void got(struct gm_port *p, void *context, gm_status_t status)
{
  struct range *r = context;
  char what[96];
  (void)p;
  r->calls++;
  r->status = status;
  gets_pending--;
  /* A get issued with others: its own range is complete now, whatever
     the others' state. */
  if (r->together && status == GM_SUCCESS) {
    snprintf(what, sizeof what, "the get of %lu bytes from %lu", r->len, r->remote);
    compare(r->local, r->local + r->len, what);
  }
}

static void issue(struct range *r)
{
  gets_pending++;
  gm_get(prog.port, remote + r->remote, dst + r->local, r->len,
         r->high ? GM_HIGH_PRIORITY : GM_LOW_PRIORITY, prog.peer, prog.port_id, got, r);
}

static int checked(struct range *r)
{
  if (r->calls != 1 || r->status != GM_SUCCESS) {
    fprintf(stderr, "gm_get: the get of %lu bytes from %lu: %d completions, status %d (%s)\n",
            r->len, r->remote, r->calls, (int)r->status, gm_strerror(r->status));
    prog.failures++;
    return 0;
  }
  return 1;
}

static int reader(void)
{
  unsigned char *inbox = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char *out = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char m[GMT_MSG_LEN];
  unsigned long i, total = 0;
  int k;

  dst = gm_dma_malloc(prog.port, LOCAL);
  shadow = malloc(LOCAL);
  if (!inbox || !out || !dst || !shadow) {
    fprintf(stderr, "gm_get: out of memory\n");
    return 0;
  }
  for (i = 0; i < LOCAL; i++)
    dst[i] = shadow[i] = local_background(i);

  gm_provide_receive_buffer(prog.port, inbox, GMT_MSG_SIZE, GM_LOW_PRIORITY);
  gmt_wait_message(&prog, m, "the region's address");
  remote = gmt_get_be64(m);
  if (remote == 0) {
    fprintf(stderr, "gm_get: the region's address is 0\n");
    return 0;
  }

  /* One at a time: after each, the whole region is as the gets so far
     make it, and no byte more. */
  prog.waiting_for = "a get's completion";
  for (k = 0; k < NRANGES; k++) {
    struct range *r = &ranges[k];
    char what[96];
    if (r->together)
      continue;
    for (i = 0; i < r->len; i++)
      shadow[r->local + i] = source_byte(r->remote + i);
    issue(r);
    while (gets_pending > 0)
      gmt_one_event(&prog, prog.port);
    if (checked(r)) {
      snprintf(what, sizeof what, "the get of %lu bytes from %lu", r->len, r->remote);
      compare(0, LOCAL, what);
      total += r->len;
    }
  }

  /* Together: each range is checked as its completion comes (`got`). */
  prog.waiting_for = "the completions of the gets issued together";
  for (k = 0; k < NRANGES; k++)
    if (ranges[k].together) {
      struct range *r = &ranges[k];
      for (i = 0; i < r->len; i++)
        shadow[r->local + i] = source_byte(r->remote + i);
      issue(r);
    }
  while (gets_pending > 0)
    gmt_one_event(&prog, prog.port);
  for (k = 0; k < NRANGES; k++)
    if (ranges[k].together && checked(&ranges[k]))
      total += ranges[k].len;
  compare(0, LOCAL, "every get");

  /* The end: node id 2 checks its region and exits. */
  gmt_put_be32(out, total);
  gmt_put_be32(out + 4, (unsigned long)prog.failures);
  if (!gmt_send_message(&prog, out, 0, "the final message"))
    return 0;
  if (prog.failures)
    return 0;
  printf("gm_get: %lu bytes got intact in %d gets, the rest of the %lu bytes untouched\n", total,
         NRANGES, LOCAL);
  return 1;
}

/* ---- node id 2: the source ---- */

static int source(void)
{
  unsigned char *inbox = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char *out = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char *region = gm_dma_malloc(prog.port, REMOTE);
  unsigned char m[GMT_MSG_LEN];
  unsigned long i, wrong = 0;

  if (!inbox || !out || !region) {
    fprintf(stderr, "gm_get: out of DMA memory\n");
    return 0;
  }
  for (i = 0; i < REMOTE; i++)
    region[i] = source_byte(i);
  gm_provide_receive_buffer(prog.port, inbox, GMT_MSG_SIZE, GM_LOW_PRIORITY);

  gmt_put_be64(out, (gm_u64_t)(gm_size_t)region);
  if (!gmt_send_message(&prog, out, 1, "the region's address"))
    return 0;

  gmt_wait_message(&prog, m, "the final message");
  if (gmt_get_be32(m + 4) != 0)
    fprintf(stderr, "gm_get: the reader saw %lu failures\n", gmt_get_be32(m + 4));

  /* A get reads; the region it reads from is as it was. */
  for (i = 0; i < REMOTE; i++)
    if (region[i] != source_byte(i)) {
      if (wrong < 10)
        fprintf(stderr, "gm_get: byte %lu of the source region changed to %u\n", i, region[i]);
      wrong++;
    }
  if (wrong) {
    prog.failures++;
    return 0;
  }
  printf("gm_get: source region of %lu bytes unchanged after the reader got %lu bytes\n", REMOTE,
         gmt_get_be32(m));
  return 1;
}

int main(int argc, char **argv)
{
  return gmt_pair_main(&prog, argc, argv, reader, source);
}
