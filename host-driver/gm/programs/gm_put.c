/*
 * gm_put: directed sends (remote writes) into another process's memory,
 * in the manner of GM's own tests. Written only against GM's interface
 * (gm.h); every byte of the target region is checked, those the puts
 * wrote and those they must have left alone.
 *
 * Run one process on each of two nodes (NIC_CLUSTER and NIC_NODE say
 * which):
 *
 *   gm_put [-p port] [-t seconds]
 *
 * The process with node id 2 offers a region of its DMA memory: it fills
 * the region with a background pattern and sends its address (8 bytes,
 * network order) to node id 1. Node id 1 puts patterned ranges into it,
 * most with gm_put (two at high priority), one with
 * gm_directed_send_with_callback (GM 1's name for a put), and checks
 * each completion's status. It then says "done" in a message; node id 2
 * checks the whole region and answers with what it found. Node id 1
 * prints "gm_put: N bytes put intact" when all is right. Exit status 0
 * when all is right, 1 if not (with the reason on stderr).
 *
 * -t bounds the whole run: a process still waiting after that many
 * seconds (its partner never came, or a completion never did) says what
 * it was waiting for and exits 1.
 */

#include <stdio.h>

#include "gm.h"
#include "gm_test.h"

#define REGION 65536ul

/* The program, its port and its peer (gm_test.h). Messages come only
   when it waits for one: any other is a failure (gmt_unasked). */
static struct gmt prog = {.name = "gm_put", .port_id = 2, .waiting_for = "the start",
                          .handle_event = gmt_unasked};

/* ---- patterns ---- */

/* What the target region holds before any put. */
static unsigned char background(unsigned long i)
{
  return (unsigned char)(i * 7 + 3);
}

/* What a put writes at offset i of the region: never the background
   (it differs from it by a byte from 1 to 255), and different from one
   offset to the next, so that a byte put at the wrong place shows. */
static unsigned char put_byte(unsigned long i)
{
  return (unsigned char)(background(i) ^ (1 + i % 255));
}

/* ---- the puts ---- */

enum how { PUT_LOW, PUT_HIGH, DIRECTED };

/* The ranges of the region node id 1 writes, with gaps between them
   and after the last: short and long, inside one packet and across
   several (the NIC's MTU is 4096 bytes), at odd offsets. */
static struct range {
  unsigned long off, len;
  enum how how;
  int calls; /* completions reported */
  gm_status_t status;
} ranges[] = {
    {0, 1, PUT_LOW, 0, GM_SUCCESS},
    {5, 3, PUT_LOW, 0, GM_SUCCESS},
    {16, 8, PUT_HIGH, 0, GM_SUCCESS},
    {100, 4096, PUT_LOW, 0, GM_SUCCESS},
    {4200, 4097, PUT_LOW, 0, GM_SUCCESS},
    {8300, 20000, PUT_LOW, 0, GM_SUCCESS},
    {28303, 1, PUT_HIGH, 0, GM_SUCCESS},
    {30000, 9000, DIRECTED, 0, GM_SUCCESS},
    {40001, 24999, PUT_LOW, 0, GM_SUCCESS},
};
#define NRANGES ((int)(sizeof ranges / sizeof ranges[0]))

/* Does offset i of the region lie in a range put? */
static int in_range(unsigned long i)
{
  int k;
  for (k = 0; k < NRANGES; k++)
    if (i >= ranges[k].off && i < ranges[k].off + ranges[k].len)
      return 1;
  return 0;
}

static unsigned long bytes_put(void)
{
  unsigned long n = 0;
  int k;
  for (k = 0; k < NRANGES; k++)
    n += ranges[k].len;
  return n;
}

/* ---- node id 1: the puts ---- */

static int puts_pending;

static void put_done(struct gm_port *p, void *context, gm_status_t status)
{
  struct range *r = context;
  (void)p;
  r->calls++;
  r->status = status;
  puts_pending--;
}

static int putter(void)
{
  unsigned char *inbox = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char *out = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char *src = gm_dma_malloc(prog.port, REGION);
  unsigned char m[GMT_MSG_LEN];
  gm_remote_ptr_t region;
  unsigned long i, total = bytes_put(), intact, wrong;
  int k;

  if (!inbox || !out || !src) {
    fprintf(stderr, "gm_put: out of DMA memory\n");
    return 0;
  }
  /* The one buffer takes the region's address, then the verdict. */
  gm_provide_receive_buffer(prog.port, inbox, GMT_MSG_SIZE, GM_LOW_PRIORITY);
  gmt_wait_message(&prog, m, "the region's address");
  region = gmt_get_be64(m);
  if (region == 0) {
    fprintf(stderr, "gm_put: the region's address is 0\n");
    return 0;
  }
  gm_provide_receive_buffer(prog.port, inbox, GMT_MSG_SIZE, GM_LOW_PRIORITY);

  /* The source holds, at each range's offset, what the range is to
     hold in the region. */
  for (i = 0; i < REGION; i++)
    src[i] = put_byte(i);

  /* All the puts at once: more of them than the port has send tokens,
     so that some wait for the first to complete. */
  prog.waiting_for = "the puts' completions";
  for (k = 0; k < NRANGES; k++) {
    struct range *r = &ranges[k];
    puts_pending++;
    switch (r->how) {
    case PUT_LOW:
    case PUT_HIGH:
      gm_put(prog.port, src + r->off, region + r->off, r->len,
             r->how == PUT_HIGH ? GM_HIGH_PRIORITY : GM_LOW_PRIORITY, prog.peer, prog.port_id,
             put_done, r);
      break;
    case DIRECTED:
      gm_directed_send_with_callback(prog.port, src + r->off, region + r->off, r->len,
                                     GM_LOW_PRIORITY, prog.peer, prog.port_id, put_done, r);
      break;
    }
  }
  while (puts_pending > 0)
    gmt_one_event(&prog, prog.port);
  for (k = 0; k < NRANGES; k++) {
    struct range *r = &ranges[k];
    if (r->calls != 1 || r->status != GM_SUCCESS) {
      fprintf(stderr, "gm_put: the put of %lu bytes at offset %lu: %d completions, status %d (%s)\n",
              r->len, r->off, r->calls, (int)r->status, gm_strerror(r->status));
      prog.failures++;
    }
  }
  /* A put reads its source and leaves it as it was. */
  for (i = 0; i < REGION; i++)
    if (src[i] != put_byte(i)) {
      fprintf(stderr, "gm_put: the source changed at offset %lu\n", i);
      prog.failures++;
      break;
    }

  /* Done: how many ranges, and whether this side saw anything wrong. */
  gmt_put_be32(out, (unsigned long)NRANGES);
  gmt_put_be32(out + 4, (unsigned long)prog.failures);
  if (!gmt_send_message(&prog, out, 0, "the \"done\" message"))
    return 0;

  gmt_wait_message(&prog, m, "the target's verdict");
  intact = gmt_get_be32(m);
  wrong = gmt_get_be32(m + 4);
  if (wrong != 0 || intact != total) {
    fprintf(stderr, "gm_put: the target found %lu bytes put intact (of %lu) and %lu bytes wrong\n",
            intact, total, wrong);
    prog.failures++;
  }
  if (prog.failures)
    return 0;
  printf("gm_put: %lu bytes put intact in %d puts, the rest of the %lu bytes untouched\n", total,
         NRANGES, REGION);
  return 1;
}

/* ---- node id 2: the target ---- */

static int target(void)
{
  unsigned char *inbox = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char *out = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char *region = gm_dma_malloc(prog.port, REGION);
  unsigned char m[GMT_MSG_LEN];
  unsigned long i, intact = 0, untouched = 0, wrong = 0;

  if (!inbox || !out || !region) {
    fprintf(stderr, "gm_put: out of DMA memory\n");
    return 0;
  }
  for (i = 0; i < REGION; i++)
    region[i] = background(i);
  gm_provide_receive_buffer(prog.port, inbox, GMT_MSG_SIZE, GM_LOW_PRIORITY);

  gmt_put_be64(out, (gm_u64_t)(gm_size_t)region);
  if (!gmt_send_message(&prog, out, 1, "the region's address"))
    return 0;

  gmt_wait_message(&prog, m, "the \"done\" message");
  if (gmt_get_be32(m) != (unsigned long)NRANGES) {
    fprintf(stderr, "gm_put: the putter says %lu ranges, not %d\n", gmt_get_be32(m), NRANGES);
    prog.failures++;
  }
  if (gmt_get_be32(m + 4) != 0)
    fprintf(stderr, "gm_put: the putter saw %lu failures\n", gmt_get_be32(m + 4));

  for (i = 0; i < REGION; i++) {
    int put = in_range(i);
    unsigned char want = put ? put_byte(i) : background(i);
    if (region[i] == want) {
      if (put)
        intact++;
      else
        untouched++;
    } else {
      if (wrong < 10)
        fprintf(stderr, "gm_put: byte %lu of the region (%s) is %u, not %u\n", i,
                put ? "put" : "not put", region[i], want);
      wrong++;
    }
  }
  if (wrong)
    prog.failures++;

  gmt_put_be32(out, intact);
  gmt_put_be32(out + 4, wrong);
  if (!gmt_send_message(&prog, out, 0, "the verdict"))
    return 0;
  printf("gm_put: target region of %lu bytes checked: %lu bytes put, %lu untouched, %lu wrong\n",
         REGION, intact, untouched, wrong);
  return prog.failures == 0;
}

int main(int argc, char **argv)
{
  return gmt_pair_main(&prog, argc, argv, putter, target);
}
