/*
 * gm_bench: one-way latency and streaming bandwidth through GM, measured
 * as the project's own pingpong and stream programs measure them through
 * the host driver, so that `cargo xtask bench --gm` can set the two side
 * by side. Written only against GM's interface; every message checked.
 *
 *   gm_bench -m pingpong [-l bytes] [-n round trips] [-p port]
 *   gm_bench -m stream   [-l bytes] [-n messages]    [-p port] [-w window] [-r buffers]
 *
 * Node id 1 pings (or sends the stream), node id 2 answers (or receives).
 * The ping side prints the one-way latency (half of each round trip: the
 * median, the least and the 99th percentile, in microseconds); the
 * receiving side of a stream prints its rate (every message after the
 * first, from the first arrival to the last, in 10^6 bytes a second).
 * One line of JSON each. Exit status 0 when every message was intact.
 */

#define _POSIX_C_SOURCE 200112L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gm.h"
#include "gm_test.h"

/* The program, its port and the other process (gm_test.h). */
static struct gmt prog = {.name = "gm_bench", .port_id = 4};
static unsigned int size;
static int pending;
static gm_status_t last_status;

static double now_us(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void sent(struct gm_port *p, void *context, gm_status_t status)
{
  (void)p;
  (void)context;
  pending--;
  last_status = status;
  if (status != GM_SUCCESS && status != GM_SEND_TARGET_PORT_CLOSED) {
    gm_perror("gm_bench: a send failed", status);
    prog.failures++;
  }
}

/* A message's content: 64-bit words, each the last plus a constant from
   a start that depends on the message's number (as the host programs'
   pattern is made, so that writing and checking it costs alike). */
#define STEP 0x9E3779B97F4A7C15ull

static gm_u64_t first_word(unsigned long seq)
{
  gm_u64_t z = (gm_u64_t)seq + STEP;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void fill(unsigned char *b, unsigned long len, unsigned long seq)
{
  gm_u64_t w = first_word(seq);
  unsigned long i;
  for (i = 0; i + 8 <= len; i += 8, w += STEP)
    memcpy(b + i, &w, 8);
  if (i < len)
    memcpy(b + i, &w, len - i);
}

static void check(const unsigned char *b, unsigned long len, unsigned long want,
                  unsigned long seq)
{
  gm_u64_t w = first_word(seq), x = 0;
  unsigned long i;
  if (len != want) {
    fprintf(stderr, "gm_bench: message %lu has %lu bytes, not %lu\n", seq, len, want);
    prog.failures++;
    return;
  }
  for (i = 0; i + 8 <= len; i += 8, w += STEP) {
    memcpy(&x, b + i, 8);
    if (x != w)
      break;
  }
  if (i + 8 <= len || (i < len && memcmp(b + i, &w, len - i))) {
    fprintf(stderr, "gm_bench: message %lu: wrong at byte %lu\n", seq, i);
    prog.failures++;
  }
}

/* Run gm_unknown on events until at most `limit` sends are pending. */
static void pending_at_most(int limit)
{
  while (pending > limit)
    gm_unknown(prog.port, gm_blocking_receive(prog.port));
}

/* The next message: its bytes and length (the buffer is the caller's). */
static unsigned char *next_message(unsigned long *len)
{
  for (;;) {
    gm_recv_event_t *e = gm_blocking_receive(prog.port);
    switch (gm_ntoh_u8(e->recv.type)) {
    case GM_RECV_EVENT:
    case GM_PEER_RECV_EVENT:
    case GM_FAST_RECV_EVENT:
    case GM_FAST_PEER_RECV_EVENT:
      *len = gm_ntoh_u32(e->recv.length);
      return gm_memorize_message(gm_ntohp(e->recv.message), gm_ntohp(e->recv.buffer),
                                 (unsigned int)*len);
    default:
      gm_unknown(prog.port, e);
    }
  }
}

static void send(void *buf, unsigned long len)
{
  pending++;
  gm_send_with_callback(prog.port, buf, size, len, GM_LOW_PRIORITY, prog.peer, prog.port_id, sent,
                        NULL);
}

/* The first message, sent until the other side's port is open. */
static void first_send(void *buf, unsigned long len)
{
  int tries;
  for (tries = 0; tries < 2000; tries++) {
    send(buf, len);
    pending_at_most(0);
    if (last_status == GM_SUCCESS)
      return;
    gm_resume_sending(prog.port, GM_LOW_PRIORITY, prog.peer, prog.port_id, NULL, NULL);
    gmt_pause_ms(&prog, prog.port, 5);
  }
  fprintf(stderr, "gm_bench: the other side's port never opened\n");
  exit(1);
}

static int by_value(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void pingpong(unsigned long len, unsigned long count, int ping)
{
  unsigned char *out = gm_dma_malloc(prog.port, len);
  unsigned char *in = gm_dma_malloc(prog.port, gm_max_length_for_size(size));
  double *one_way = malloc(count * sizeof *one_way);
  unsigned long k, got;
  if (!out || !in || !one_way) {
    fprintf(stderr, "gm_bench: out of memory\n");
    exit(1);
  }
  gm_provide_receive_buffer(prog.port, in, size, GM_LOW_PRIORITY);
  /* Round 0 meets the other side; it is not timed. */
  for (k = 0; k <= count; k++) {
    double t0 = now_us();
    unsigned char *m;
    if (ping) {
      fill(out, len, k);
      if (k == 0)
        first_send(out, len);
      else
        send(out, len);
      m = next_message(&got);
    } else {
      m = next_message(&got);
    }
    check(m, got, len, k);
    gm_provide_receive_buffer(prog.port, m, size, GM_LOW_PRIORITY);
    if (!ping) {
      memcpy(out, m, len);
      send(out, len);
    }
    pending_at_most(0);
    if (ping && k > 0)
      one_way[k - 1] = (now_us() - t0) / 2;
  }
  if (ping) {
    qsort(one_way, count, sizeof *one_way, by_value);
    printf("{\"mode\":\"pingpong\",\"len\":%lu,\"count\":%lu,\"one_way_us\":{\"median\":%.3f,"
           "\"min\":%.3f,\"p99\":%.3f}}\n",
           len, count, one_way[count / 2], one_way[0], one_way[count * 99 / 100]);
  }
}

static void stream(unsigned long len, unsigned long count, int sender, unsigned int window,
                   unsigned int buffers)
{
  unsigned long k, got;
  unsigned int i;
  if (sender) {
    unsigned char **out = malloc(window * sizeof *out);
    for (i = 0; i < window; i++)
      if (!out || !(out[i] = gm_dma_malloc(prog.port, len))) {
        fprintf(stderr, "gm_bench: out of DMA memory\n");
        exit(1);
      }
    for (k = 0; k < count; k++) {
      unsigned char *b = out[k % window];
      pending_at_most((int)window - 1);
      fill(b, len, k);
      if (k == 0)
        first_send(b, len);
      else
        send(b, len);
    }
    pending_at_most(0);
  } else {
    double t_first = 0, t_last = 0;
    for (i = 0; i < buffers; i++) {
      void *b = gm_dma_malloc(prog.port, gm_max_length_for_size(size));
      if (!b) {
        fprintf(stderr, "gm_bench: out of DMA memory\n");
        exit(1);
      }
      gm_provide_receive_buffer(prog.port, b, size, GM_LOW_PRIORITY);
    }
    for (k = 0; k < count; k++) {
      unsigned char *m = next_message(&got);
      t_last = now_us();
      if (k == 0)
        t_first = t_last;
      check(m, got, len, k);
      if (k + buffers < count)
        gm_provide_receive_buffer(prog.port, m, size, GM_LOW_PRIORITY);
    }
    printf("{\"mode\":\"stream\",\"len\":%lu,\"count\":%lu,\"mb_per_s\":%.3f}\n", len, count,
           t_last > t_first ? (double)(count - 1) * len / (t_last - t_first) : 0.0);
  }
}

int main(int argc, char **argv)
{
  const char *mode = "pingpong";
  unsigned long len = 8, count = 10000;
  unsigned int window = 8, buffers = 16;
  gm_status_t s;
  int i;

  for (i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-m"))
      mode = argv[i + 1];
    else if (!strcmp(argv[i], "-l"))
      len = strtoul(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "-n"))
      count = strtoul(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "-p"))
      prog.port_id = (unsigned int)atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-w"))
      window = (unsigned int)atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-r"))
      buffers = (unsigned int)atoi(argv[i + 1]);
    else
      break;
  }
  if (i < argc || count < 2 || len < 1 || window < 1 || buffers < 1 ||
      (strcmp(mode, "pingpong") && strcmp(mode, "stream"))) {
    fprintf(stderr,
            "usage: %s -m pingpong|stream [-l bytes] [-n count] [-p port] [-w window] "
            "[-r buffers]\n",
            argv[0]);
    return 2;
  }
  s = gm_open(&prog.port, 0, prog.port_id, "gm_bench", GM_API_VERSION_2_0);
  if (s != GM_SUCCESS) {
    gm_perror("gm_bench: gm_open", s);
    return 1;
  }
  gm_get_node_id(prog.port, &prog.me);
  prog.peer = prog.me == 1 ? 2 : 1;
  size = gm_min_size_for_length(len);
  if (window > gm_num_send_tokens(prog.port))
    window = gm_num_send_tokens(prog.port);
  if (buffers > gm_num_receive_tokens(prog.port))
    buffers = gm_num_receive_tokens(prog.port);
  if (!strcmp(mode, "pingpong"))
    pingpong(len, count, prog.me == 1);
  else
    stream(len, count, prog.me == 1, window, buffers);
  gm_close(prog.port);
  if (prog.failures)
    fprintf(stderr, "gm_bench: %d failures\n", prog.failures);
  return prog.failures ? 1 : 0;
}
