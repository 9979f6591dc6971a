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
#include <stdlib.h>
#include <string.h>

#include "gm.h"

#define REGION 65536ul
#define MSG_SIZE 4 /* GM size of the control messages: 8 bytes */
#define MSG_LEN 8

static struct gm_port *port;
static unsigned int port_id = 2;
static unsigned int me, peer;
static int failures;

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

/* ---- messages in network order ---- */

static void put_be32(unsigned char *b, unsigned long v)
{
  int k;
  for (k = 0; k < 4; k++)
    b[k] = (unsigned char)(v >> (24 - 8 * k));
}

static unsigned long get_be32(const unsigned char *b)
{
  return (unsigned long)b[0] << 24 | (unsigned long)b[1] << 16 | (unsigned long)b[2] << 8 |
         b[3];
}

static void put_be64(unsigned char *b, gm_u64_t v)
{
  int k;
  for (k = 0; k < 8; k++)
    b[k] = (unsigned char)(v >> (56 - 8 * k));
}

static gm_u64_t get_be64(const unsigned char *b)
{
  gm_u64_t v = 0;
  int k;
  for (k = 0; k < 8; k++)
    v = v << 8 | b[k];
  return v;
}

/* ---- waiting ---- */

/* What the process waits for, for the watchdog's message. */
static const char *waiting_for = "the start";
static gm_alarm_t watchdog;

static void watchdog_rang(void *context)
{
  (void)context;
  fprintf(stderr, "gm_put: node id %u: timed out waiting for %s\n", me, waiting_for);
  exit(1);
}

/* Handle one event that is not a message the program waits for. */
static void one_event(void)
{
  gm_recv_event_t *e = gm_blocking_receive(port);
  switch (gm_ntoh_u8(e->recv.type)) {
  case GM_RECV_EVENT:
  case GM_HIGH_RECV_EVENT:
  case GM_PEER_RECV_EVENT:
  case GM_HIGH_PEER_RECV_EVENT:
  case GM_FAST_RECV_EVENT:
  case GM_FAST_HIGH_RECV_EVENT:
  case GM_FAST_PEER_RECV_EVENT:
  case GM_FAST_HIGH_PEER_RECV_EVENT:
    fprintf(stderr, "gm_put: node id %u: a message of %u bytes from node id %u came unasked\n",
            me, gm_ntoh_u32(e->recv.length), gm_ntoh_u16(e->recv.sender_node_id));
    failures++;
    break;
  default:
    gm_unknown(port, e);
  }
}

/* Wait for the next message, which must be 8 bytes from the peer's
   port; its bytes, copied to `out`. */
static void wait_message(unsigned char out[MSG_LEN], const char *what)
{
  waiting_for = what;
  for (;;) {
    gm_recv_event_t *e = gm_blocking_receive(port);
    switch (gm_ntoh_u8(e->recv.type)) {
    case GM_RECV_EVENT:
    case GM_HIGH_RECV_EVENT:
    case GM_PEER_RECV_EVENT:
    case GM_HIGH_PEER_RECV_EVENT:
    case GM_FAST_RECV_EVENT:
    case GM_FAST_HIGH_RECV_EVENT:
    case GM_FAST_PEER_RECV_EVENT:
    case GM_FAST_HIGH_PEER_RECV_EVENT: {
      unsigned int len = gm_ntoh_u32(e->recv.length);
      if (gm_ntoh_u16(e->recv.sender_node_id) != peer ||
          gm_ntoh_u8(e->recv.sender_port_id) != port_id || len != MSG_LEN) {
        fprintf(stderr, "gm_put: %s: a message of %u bytes from node id %u port %u\n", what,
                len, gm_ntoh_u16(e->recv.sender_node_id), gm_ntoh_u8(e->recv.sender_port_id));
        failures++;
        memset(out, 0, MSG_LEN);
        if (len > MSG_LEN)
          len = MSG_LEN;
      }
      memcpy(out, gm_ntohp(e->recv.message), len);
      return;
    }
    default:
      gm_unknown(port, e);
    }
  }
}

/* ---- sending a control message ---- */

static int send_done;
static gm_status_t send_status;

static void message_sent(struct gm_port *p, void *context, gm_status_t status)
{
  (void)p;
  (void)context;
  send_done = 1;
  send_status = status;
}

static int rang;

static void ring(void *context)
{
  (void)context;
  rang = 1;
}

/* Wait `ms` milliseconds on an alarm, handling events meanwhile. */
static void pause_ms(unsigned int ms)
{
  gm_alarm_t a;
  gm_initialize_alarm(&a);
  rang = 0;
  gm_set_alarm(port, &a, ms * 1000ull, ring, NULL);
  while (!rang)
    one_event();
}

/* Send the 8 bytes at `buf` (DMA memory) to the peer and wait for the
   completion. With `first`, the peer may not have opened its port yet:
   a send to a closed port fails, and GM's answer is to resume sending
   and try again a little later. */
static int send_message(void *buf, int first, const char *what)
{
  int tries;
  waiting_for = what;
  for (tries = 0; tries < 2000; tries++) {
    send_done = 0;
    gm_send_with_callback(port, buf, MSG_SIZE, MSG_LEN, GM_LOW_PRIORITY, peer, port_id,
                          message_sent, NULL);
    while (!send_done)
      one_event();
    if (send_status == GM_SUCCESS)
      return 1;
    if (!first || send_status != GM_SEND_TARGET_PORT_CLOSED)
      break;
    gm_resume_sending(port, GM_LOW_PRIORITY, peer, port_id, NULL, NULL);
    pause_ms(10);
  }
  fprintf(stderr, "gm_put: node id %u: sending %s: ", me, what);
  gm_perror("", send_status);
  failures++;
  return 0;
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
  unsigned char *inbox = gm_dma_malloc(port, MSG_LEN);
  unsigned char *out = gm_dma_malloc(port, MSG_LEN);
  unsigned char *src = gm_dma_malloc(port, REGION);
  unsigned char m[MSG_LEN];
  gm_remote_ptr_t region;
  unsigned long i, total = bytes_put(), intact, wrong;
  int k;

  if (!inbox || !out || !src) {
    fprintf(stderr, "gm_put: out of DMA memory\n");
    return 0;
  }
  /* The one buffer takes the region's address, then the verdict. */
  gm_provide_receive_buffer(port, inbox, MSG_SIZE, GM_LOW_PRIORITY);
  wait_message(m, "the region's address");
  region = get_be64(m);
  if (region == 0) {
    fprintf(stderr, "gm_put: the region's address is 0\n");
    return 0;
  }
  gm_provide_receive_buffer(port, inbox, MSG_SIZE, GM_LOW_PRIORITY);

  /* The source holds, at each range's offset, what the range is to
     hold in the region. */
  for (i = 0; i < REGION; i++)
    src[i] = put_byte(i);

  /* All the puts at once: more of them than the port has send tokens,
     so that some wait for the first to complete. */
  waiting_for = "the puts' completions";
  for (k = 0; k < NRANGES; k++) {
    struct range *r = &ranges[k];
    puts_pending++;
    switch (r->how) {
    case PUT_LOW:
    case PUT_HIGH:
      gm_put(port, src + r->off, region + r->off, r->len,
             r->how == PUT_HIGH ? GM_HIGH_PRIORITY : GM_LOW_PRIORITY, peer, port_id, put_done, r);
      break;
    case DIRECTED:
      gm_directed_send_with_callback(port, src + r->off, region + r->off, r->len,
                                     GM_LOW_PRIORITY, peer, port_id, put_done, r);
      break;
    }
  }
  while (puts_pending > 0)
    one_event();
  for (k = 0; k < NRANGES; k++) {
    struct range *r = &ranges[k];
    if (r->calls != 1 || r->status != GM_SUCCESS) {
      fprintf(stderr, "gm_put: the put of %lu bytes at offset %lu: %d completions, status %d (%s)\n",
              r->len, r->off, r->calls, (int)r->status, gm_strerror(r->status));
      failures++;
    }
  }
  /* A put reads its source and leaves it as it was. */
  for (i = 0; i < REGION; i++)
    if (src[i] != put_byte(i)) {
      fprintf(stderr, "gm_put: the source changed at offset %lu\n", i);
      failures++;
      break;
    }

  /* Done: how many ranges, and whether this side saw anything wrong. */
  put_be32(out, (unsigned long)NRANGES);
  put_be32(out + 4, (unsigned long)failures);
  if (!send_message(out, 0, "the \"done\" message"))
    return 0;

  wait_message(m, "the target's verdict");
  intact = get_be32(m);
  wrong = get_be32(m + 4);
  if (wrong != 0 || intact != total) {
    fprintf(stderr, "gm_put: the target found %lu bytes put intact (of %lu) and %lu bytes wrong\n",
            intact, total, wrong);
    failures++;
  }
  if (failures)
    return 0;
  printf("gm_put: %lu bytes put intact in %d puts, the rest of the %lu bytes untouched\n", total,
         NRANGES, REGION);
  return 1;
}

/* ---- node id 2: the target ---- */

static int target(void)
{
  unsigned char *inbox = gm_dma_malloc(port, MSG_LEN);
  unsigned char *out = gm_dma_malloc(port, MSG_LEN);
  unsigned char *region = gm_dma_malloc(port, REGION);
  unsigned char m[MSG_LEN];
  unsigned long i, intact = 0, untouched = 0, wrong = 0;

  if (!inbox || !out || !region) {
    fprintf(stderr, "gm_put: out of DMA memory\n");
    return 0;
  }
  for (i = 0; i < REGION; i++)
    region[i] = background(i);
  gm_provide_receive_buffer(port, inbox, MSG_SIZE, GM_LOW_PRIORITY);

  put_be64(out, (gm_u64_t)(gm_size_t)region);
  if (!send_message(out, 1, "the region's address"))
    return 0;

  wait_message(m, "the \"done\" message");
  if (get_be32(m) != (unsigned long)NRANGES) {
    fprintf(stderr, "gm_put: the putter says %lu ranges, not %d\n", get_be32(m), NRANGES);
    failures++;
  }
  if (get_be32(m + 4) != 0)
    fprintf(stderr, "gm_put: the putter saw %lu failures\n", get_be32(m + 4));

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
    failures++;

  put_be32(out, intact);
  put_be32(out + 4, wrong);
  if (!send_message(out, 0, "the verdict"))
    return 0;
  printf("gm_put: target region of %lu bytes checked: %lu bytes put, %lu untouched, %lu wrong\n",
         REGION, intact, untouched, wrong);
  return failures == 0;
}

int main(int argc, char **argv)
{
  unsigned int seconds = 30;
  gm_status_t s;
  int i, ok;

  for (i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-p"))
      port_id = (unsigned int)atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-t"))
      seconds = (unsigned int)atoi(argv[i + 1]);
    else
      break;
  }
  if (i < argc || seconds < 1) {
    fprintf(stderr, "usage: %s [-p port] [-t seconds]\n", argv[0]);
    return 2;
  }

  s = gm_init();
  if (s == GM_SUCCESS)
    s = gm_open(&port, 0, port_id, "gm_put", GM_API_VERSION_2_0);
  if (s != GM_SUCCESS) {
    gm_perror("gm_put: gm_open", s);
    return 1;
  }
  gm_get_node_id(port, &me);
  if (me != 1 && me != 2) {
    fprintf(stderr, "gm_put: node id %u: run on node ids 1 and 2\n", me);
    return 1;
  }
  peer = me == 1 ? 2 : 1;
  gm_initialize_alarm(&watchdog);
  gm_set_alarm(port, &watchdog, seconds * 1000000ull, watchdog_rang, NULL);

  ok = me == 1 ? putter() : target();

  gm_cancel_alarm(&watchdog);
  gm_close(port);
  gm_finalize();
  if (!ok || failures) {
    fprintf(stderr, "gm_put: node id %u: failed\n", me);
    return 1;
  }
  return 0;
}
