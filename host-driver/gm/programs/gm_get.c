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
#include <string.h>

#include "gm.h"

#define REMOTE 65536ul /* node id 2's region */
#define LOCAL 70000ul  /* node id 1's */
#define MSG_SIZE 4     /* GM size of the control messages: 8 bytes */
#define MSG_LEN 8

static struct gm_port *port;
static unsigned int port_id = 2;
static unsigned int me, peer;
static int failures;

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

static const char *waiting_for = "the start";
static gm_alarm_t watchdog;

static void watchdog_rang(void *context)
{
  (void)context;
  fprintf(stderr, "gm_get: node id %u: timed out waiting for %s\n", me, waiting_for);
  exit(1);
}

static int is_message(gm_recv_event_t *e)
{
  switch (gm_ntoh_u8(e->recv.type)) {
  case GM_RECV_EVENT:
  case GM_HIGH_RECV_EVENT:
  case GM_PEER_RECV_EVENT:
  case GM_HIGH_PEER_RECV_EVENT:
  case GM_FAST_RECV_EVENT:
  case GM_FAST_HIGH_RECV_EVENT:
  case GM_FAST_PEER_RECV_EVENT:
  case GM_FAST_HIGH_PEER_RECV_EVENT:
    return 1;
  default:
    return 0;
  }
}

/* Handle one event that is not a message the program waits for. */
static void one_event(void)
{
  gm_recv_event_t *e = gm_blocking_receive(port);
  if (is_message(e)) {
    fprintf(stderr, "gm_get: node id %u: a message of %u bytes from node id %u came unasked\n",
            me, gm_ntoh_u32(e->recv.length), gm_ntoh_u16(e->recv.sender_node_id));
    failures++;
  } else {
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
    if (is_message(e)) {
      unsigned int len = gm_ntoh_u32(e->recv.length);
      memset(out, 0, MSG_LEN);
      if (gm_ntoh_u16(e->recv.sender_node_id) != peer ||
          gm_ntoh_u8(e->recv.sender_port_id) != port_id || len != MSG_LEN) {
        fprintf(stderr, "gm_get: %s: a message of %u bytes from node id %u port %u\n", what,
                len, gm_ntoh_u16(e->recv.sender_node_id), gm_ntoh_u8(e->recv.sender_port_id));
        failures++;
        if (len > MSG_LEN)
          len = MSG_LEN;
      }
      memcpy(out, gm_ntohp(e->recv.message), len);
      return;
    }
    gm_unknown(port, e);
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
  fprintf(stderr, "gm_get: node id %u: sending %s: ", me, what);
  gm_perror("", send_status);
  failures++;
  return 0;
}

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
    failures++;
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
  gm_get(port, remote + r->remote, dst + r->local, r->len,
         r->high ? GM_HIGH_PRIORITY : GM_LOW_PRIORITY, peer, port_id, got, r);
}

static int checked(struct range *r)
{
  if (r->calls != 1 || r->status != GM_SUCCESS) {
    fprintf(stderr, "gm_get: the get of %lu bytes from %lu: %d completions, status %d (%s)\n",
            r->len, r->remote, r->calls, (int)r->status, gm_strerror(r->status));
    failures++;
    return 0;
  }
  return 1;
}

static int reader(void)
{
  unsigned char *inbox = gm_dma_malloc(port, MSG_LEN);
  unsigned char *out = gm_dma_malloc(port, MSG_LEN);
  unsigned char m[MSG_LEN];
  unsigned long i, total = 0;
  int k;

  dst = gm_dma_malloc(port, LOCAL);
  shadow = malloc(LOCAL);
  if (!inbox || !out || !dst || !shadow) {
    fprintf(stderr, "gm_get: out of memory\n");
    return 0;
  }
  for (i = 0; i < LOCAL; i++)
    dst[i] = shadow[i] = local_background(i);

  gm_provide_receive_buffer(port, inbox, MSG_SIZE, GM_LOW_PRIORITY);
  wait_message(m, "the region's address");
  remote = get_be64(m);
  if (remote == 0) {
    fprintf(stderr, "gm_get: the region's address is 0\n");
    return 0;
  }

  /* One at a time: after each, the whole region is as the gets so far
     make it, and no byte more. */
  waiting_for = "a get's completion";
  for (k = 0; k < NRANGES; k++) {
    struct range *r = &ranges[k];
    char what[96];
    if (r->together)
      continue;
    for (i = 0; i < r->len; i++)
      shadow[r->local + i] = source_byte(r->remote + i);
    issue(r);
    while (gets_pending > 0)
      one_event();
    if (checked(r)) {
      snprintf(what, sizeof what, "the get of %lu bytes from %lu", r->len, r->remote);
      compare(0, LOCAL, what);
      total += r->len;
    }
  }

  /* Together: each range is checked as its completion comes (`got`). */
  waiting_for = "the completions of the gets issued together";
  for (k = 0; k < NRANGES; k++)
    if (ranges[k].together) {
      struct range *r = &ranges[k];
      for (i = 0; i < r->len; i++)
        shadow[r->local + i] = source_byte(r->remote + i);
      issue(r);
    }
  while (gets_pending > 0)
    one_event();
  for (k = 0; k < NRANGES; k++)
    if (ranges[k].together && checked(&ranges[k]))
      total += ranges[k].len;
  compare(0, LOCAL, "every get");

  /* The end: node id 2 checks its region and exits. */
  put_be32(out, total);
  put_be32(out + 4, (unsigned long)failures);
  if (!send_message(out, 0, "the final message"))
    return 0;
  if (failures)
    return 0;
  printf("gm_get: %lu bytes got intact in %d gets, the rest of the %lu bytes untouched\n", total,
         NRANGES, LOCAL);
  return 1;
}

/* ---- node id 2: the source ---- */

static int source(void)
{
  unsigned char *inbox = gm_dma_malloc(port, MSG_LEN);
  unsigned char *out = gm_dma_malloc(port, MSG_LEN);
  unsigned char *region = gm_dma_malloc(port, REMOTE);
  unsigned char m[MSG_LEN];
  unsigned long i, wrong = 0;

  if (!inbox || !out || !region) {
    fprintf(stderr, "gm_get: out of DMA memory\n");
    return 0;
  }
  for (i = 0; i < REMOTE; i++)
    region[i] = source_byte(i);
  gm_provide_receive_buffer(port, inbox, MSG_SIZE, GM_LOW_PRIORITY);

  put_be64(out, (gm_u64_t)(gm_size_t)region);
  if (!send_message(out, 1, "the region's address"))
    return 0;

  wait_message(m, "the final message");
  if (get_be32(m + 4) != 0)
    fprintf(stderr, "gm_get: the reader saw %lu failures\n", get_be32(m + 4));

  /* A get reads; the region it reads from is as it was. */
  for (i = 0; i < REMOTE; i++)
    if (region[i] != source_byte(i)) {
      if (wrong < 10)
        fprintf(stderr, "gm_get: byte %lu of the source region changed to %u\n", i, region[i]);
      wrong++;
    }
  if (wrong) {
    failures++;
    return 0;
  }
  printf("gm_get: source region of %lu bytes unchanged after the reader got %lu bytes\n", REMOTE,
         get_be32(m));
  return 1;
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
    s = gm_open(&port, 0, port_id, "gm_get", GM_API_VERSION_2_0);
  if (s != GM_SUCCESS) {
    gm_perror("gm_get: gm_open", s);
    return 1;
  }
  gm_get_node_id(port, &me);
  if (me != 1 && me != 2) {
    fprintf(stderr, "gm_get: node id %u: run on node ids 1 and 2\n", me);
    return 1;
  }
  peer = me == 1 ? 2 : 1;
  gm_initialize_alarm(&watchdog);
  gm_set_alarm(port, &watchdog, seconds * 1000000ull, watchdog_rang, NULL);

  ok = me == 1 ? reader() : source();

  gm_cancel_alarm(&watchdog);
  gm_close(port);
  gm_finalize();
  if (!ok || failures) {
    fprintf(stderr, "gm_get: node id %u: failed\n", me);
    return 1;
  }
  return 0;
}
