/*
 * gm_allsize: latency and bandwidth between two GM ports over every
 * message size, in the manner of GM's own all-sizes test. Written only
 * against GM's interface (gm.h); every byte that arrives is checked.
 *
 * Run one process on each of two nodes (NIC_CLUSTER and NIC_NODE, or an
 * MPI launcher, say which). The one with node id 1 leads:
 *
 *   gm_allsize [-p port] [-n iterations] [-s largest size] [-b burst]
 *
 * For each GM size from 4 up: a ping-pong of messages of the size's
 * largest length, then a stream (the leader sends bursts, the other
 * answers each burst with one short message). The leader prints a line
 * per size. Exit status 0 when every message arrived intact, 1 if not.
 */

#include <stdio.h>
#include <string.h>

#include "gm.h"
#include "gm_test.h"

#define MIN_SIZE 4
#define MAX_BURST 64

/* The program, its port and the other process (gm_test.h). */
static struct gmt prog = {.name = "gm_allsize", .port_id = 2};
static int sends_pending;

/* The current size's receive buffers: how many are with GM, and how
   many messages of the size are still to come. */
static unsigned int cur_size;
static unsigned int outstanding;
static unsigned long remaining;

static void sent(struct gm_port *p, void *context, gm_status_t status)
{
  (void)p;
  (void)context;
  sends_pending--;
  if (status != GM_SUCCESS) {
    gm_perror("gm_allsize: a send failed", status);
    prog.failures++;
  }
}

/* The byte at offset i of message number seq of a length. */
static unsigned char pattern(unsigned long seq, unsigned long i, unsigned long len)
{
  return (unsigned char)(seq * 131 + i * 7 + len);
}

static void fill(unsigned char *b, unsigned long len, unsigned long seq)
{
  unsigned long i;
  for (i = 0; i < len; i++)
    b[i] = pattern(seq, i, len);
}

static void check(const unsigned char *b, unsigned long len, unsigned long want_len,
                  unsigned long seq)
{
  unsigned long i;
  if (len != want_len) {
    fprintf(stderr, "gm_allsize: message %lu has %lu bytes, not %lu\n", seq, len, want_len);
    prog.failures++;
    return;
  }
  for (i = 0; i < len; i++)
    if (b[i] != pattern(seq, i, len)) {
      fprintf(stderr, "gm_allsize: message %lu of %lu bytes: byte %lu is %u, not %u\n", seq,
              len, i, b[i], pattern(seq, i, len));
      prog.failures++;
      return;
    }
}

/* Give GM buffers of `size` for the `expected` messages of it to come,
   at most `want` at a time. */
static void begin_size(void **pool, unsigned int size, unsigned long expected, unsigned int want)
{
  unsigned int k;
  cur_size = size;
  remaining = expected;
  outstanding = 0;
  for (k = 0; k < want && outstanding < remaining; k++) {
    gm_provide_receive_buffer_with_tag(prog.port, pool[k], size, GM_LOW_PRIORITY, k);
    outstanding++;
  }
}

/* The program is done with a message's buffer: back to GM if more
   messages of the size will come than GM holds buffers for. */
static void done_with(void *buffer)
{
  if (remaining > outstanding) {
    gm_provide_receive_buffer_with_tag(prog.port, buffer, cur_size, GM_LOW_PRIORITY, 0);
    outstanding++;
  }
}

/* Wait for the next message (gm_unknown runs everything else). */
static void *wait_message(unsigned long *len)
{
  for (;;) {
    gm_recv_event_t *e = gm_blocking_receive(prog.port);
    if (gmt_is_message(e)) {
      if (gm_ntoh_u16(e->recv.sender_node_id) != prog.peer ||
          gm_ntoh_u8(e->recv.sender_port_id) != prog.port_id ||
          gm_ntoh_u8(e->recv.size) != cur_size) {
        fprintf(stderr, "gm_allsize: a message from node id %u port %u of size %u\n",
                gm_ntoh_u16(e->recv.sender_node_id), gm_ntoh_u8(e->recv.sender_port_id),
                gm_ntoh_u8(e->recv.size));
        prog.failures++;
      }
      outstanding--;
      remaining--;
      *len = gm_ntoh_u32(e->recv.length);
      return gm_memorize_message(gm_ntohp(e->recv.message), gm_ntohp(e->recv.buffer),
                                 (unsigned int)*len);
    }
    gm_unknown(prog.port, e);
  }
}

/* Run gm_unknown on events until fewer than `limit` sends are pending. */
static void sends_below(int limit)
{
  while (sends_pending >= limit)
    gmt_one_event(&prog, prog.port);
}

/* The leader's first message (0 bytes, size 3), sent until the other
   side's port is open to take it: a send to a port not yet open fails,
   and GM's answer is to resume sending and try again. (Any failure is
   tried again, every 10 ms for 10 seconds.) */
static int hello(void *buf)
{
  gm_status_t s = GM_SUCCESS;
  int tries;
  for (tries = 0; tries < 1000; tries++) {
    s = gmt_send_and_wait(&prog, buf, 3, 0);
    if (s == GM_SUCCESS)
      return 1;
    gm_resume_sending(prog.port, GM_LOW_PRIORITY, prog.peer, prog.port_id, NULL, NULL);
    gmt_pause_ms(&prog, prog.port, 10);
  }
  gm_perror("gm_allsize: the other side never answered", s);
  return 0;
}

static void send_one(void *buf, unsigned long len)
{
  sends_below((int)gm_num_send_tokens(prog.port));
  sends_pending++;
  gm_send_with_callback(prog.port, buf, cur_size, len, GM_LOW_PRIORITY, prog.peer, prog.port_id,
                        sent, NULL);
}

int main(int argc, char **argv)
{
  unsigned int size, max_size = 16, iterations = 100, burst = 8;
  unsigned int k, leader;
  unsigned char *out[MAX_BURST];
  void *pool[MAX_BURST];
  struct gmt_option options[] = {
      {'p', &prog.port_id}, {'n', &iterations}, {'s', &max_size}, {'b', &burst}, {0, NULL}};

  if (!gmt_options(argc, argv, options) || burst < 1 || max_size < MIN_SIZE || iterations < 1) {
    fprintf(stderr, "usage: %s [-p port] [-n iterations] [-s largest size] [-b burst]\n",
            argv[0]);
    return 2;
  }

  if (!gmt_open(&prog))
    return 1;
  leader = prog.me == 1;
  prog.peer = leader ? 2 : 1;
  if (burst > gm_num_receive_tokens(prog.port))
    burst = gm_num_receive_tokens(prog.port);
  if (burst > gm_num_send_tokens(prog.port))
    burst = gm_num_send_tokens(prog.port);
  if (burst > MAX_BURST)
    burst = MAX_BURST;

  for (k = 0; k < burst; k++) {
    out[k] = gm_dma_malloc(prog.port, gm_max_length_for_size(max_size));
    pool[k] = gm_dma_malloc(prog.port, gm_max_length_for_size(max_size));
    if (!out[k] || !pool[k]) {
      fprintf(stderr, "gm_allsize: out of DMA memory\n");
      return 1;
    }
  }

  /* Meet: the other side takes the leader's hello in a buffer of size
     3, whatever the order the two started in. */
  if (leader) {
    if (!hello(out[0]))
      return 1;
  } else {
    unsigned long got = 0;
    void *m;
    begin_size(pool, 3, 1, 1);
    m = wait_message(&got);
    check(m, got, 0, 0);
  }

  if (leader)
    printf("%5s %10s %12s %12s\n", "size", "bytes", "one-way us", "MB/s");

  for (size = MIN_SIZE; size <= max_size; size++) {
    unsigned long len = gm_max_length_for_size(size), got;
    unsigned long seq = 0;
    gm_u64_t t0, t1, t2;
    void *m;

    /* The messages of this size each side receives: the ping-pong's,
       then the stream's (bursts one way, one answer each the other),
       then the closing one. */
    if (leader)
      begin_size(pool, size, 2ul * iterations + 1, burst);
    else
      begin_size(pool, size, (unsigned long)iterations * (burst + 1) + 1, burst);

    /* (A message that comes before the other side has its buffers of
       the size waits in the NIC, which tries it again.) */
    t0 = gm_ticks(prog.port);
    for (k = 0; k < iterations; k++, seq++) {
      if (leader) {
        fill(out[0], len, seq);
        send_one(out[0], len);
        m = wait_message(&got);
        check(m, got, len, seq);
      } else {
        m = wait_message(&got);
        check(m, got, len, seq);
        sends_below(1);
        memcpy(out[0], m, len);
        send_one(out[0], len);
      }
      done_with(m);
      sends_below(1);
    }
    t1 = gm_ticks(prog.port);

    for (k = 0; k < iterations; k++) {
      unsigned int j;
      if (leader) {
        for (j = 0; j < burst; j++, seq++) {
          fill(out[j], len, seq);
          send_one(out[j], len);
        }
        m = wait_message(&got);
        check(m, got, 1, 0);
        done_with(m);
        sends_below(1);
      } else {
        for (j = 0; j < burst; j++, seq++) {
          m = wait_message(&got);
          check(m, got, len, seq);
          done_with(m);
        }
        sends_below(1);
        fill(out[0], 1, 0);
        send_one(out[0], 1);
      }
    }
    sends_below(1);
    t2 = gm_ticks(prog.port);

    /* The closing message: the leader's, answered, so that each side
       has had every message of the size before the next. */
    if (leader) {
      fill(out[0], 1, 0);
      send_one(out[0], 1);
      sends_below(1);
      m = wait_message(&got);
      check(m, got, 1, 0);
    } else {
      m = wait_message(&got);
      check(m, got, 1, 0);
      fill(out[0], 1, 0);
      send_one(out[0], 1);
      sends_below(1);
    }
    if (outstanding != 0 || remaining != 0) {
      fprintf(stderr, "gm_allsize: size %u ended with %u buffers out, %lu messages to come\n",
              size, outstanding, remaining);
      prog.failures++;
    }

    if (leader) {
      /* gm_ticks counts half microseconds. */
      double one_way = (double)(t1 - t0) / 2.0 / 2.0 / iterations;
      double us = (double)(t2 - t1) / 2.0;
      double mbs = us > 0 ? (double)len * burst * iterations / us : 0;
      printf("%5u %10lu %12.2f %12.2f\n", size, len, one_way, mbs);
      fflush(stdout);
    }
  }

  if (prog.failures)
    fprintf(stderr, "gm_allsize: %d failures\n", prog.failures);
  else
    printf("gm_allsize: every message intact\n");
  gm_close(prog.port);
  gm_finalize();
  return prog.failures ? 1 : 0;
}
