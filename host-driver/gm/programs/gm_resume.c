/*
 * gm_resume: what GM does after a send fails, in the manner of GM's own
 * tests. Written only against GM's interface (gm.h).
 *
 * Run one process on each of two nodes (NIC_CLUSTER and NIC_NODE say
 * which):
 *
 *   gm_resume [-p port] [-c closed port] [-t seconds]
 *
 * Both open `port` (2 unless told); node id 2 keeps `closed port` (7
 * unless told) closed until node id 1 asks it to open it. GM's rules,
 * which node id 1 checks:
 *
 * - A send to a port that is not open completes with
 *   GM_SEND_TARGET_PORT_CLOSED.
 * - A failed send disables its connection (the target port, at the
 *   send's priority): the sends queued to it behind the failed one, and
 *   those the program issues to it after the failure, wait. They do not
 *   complete until the program calls gm_resume_sending (they go again)
 *   or gm_drop_sends (they complete with GM_SEND_DROPPED, and then
 *   gm_drop_sends' own callback runs).
 * - Other connections go on meanwhile: a message to `port` of the same
 *   node arrives.
 * - After gm_resume_sending, a send to the port, open now, succeeds and
 *   its message arrives intact; the dropped sends never arrive.
 *
 * Node id 1 prints a line per rule it found kept and "gm_resume: ok";
 * node id 2 checks what arrives at each port. Exit status 0 when all is
 * right, 1 if not (with the reason on stderr).
 *
 * -t bounds the whole run: a process still waiting after that many
 * seconds says what it was waiting for and exits 1.
 */

#include <stdio.h>
#include <string.h>

#include "gm.h"
#include "gm_test.h"

#define DATA_LEN 3000ul /* the message that arrives at last */
/* How long node id 1 watches the held sends not complete. */
#define HOLD_MS 200
/* How long node id 2 watches for anything more at the opened port. */
#define QUIET_MS 100

/* The control messages: a kind and a value, each 4 bytes in network
   order. */
enum kind { HELLO = 1, PING, OPEN_IT, OPENED, VERDICT };

/* The handle_event of the program's ports (gm_test.h): messages come
   only when it waits for one, and any other is a failure. */
static void unasked(struct gmt *t, struct gm_port *p, gm_recv_event_t *e)
{
  if (gmt_is_message(e)) {
    fprintf(stderr,
            "gm_resume: node id %u: a message of %u bytes from node id %u port %u came unasked "
            "to port %u\n",
            t->me, gm_ntoh_u32(e->recv.length), gm_ntoh_u16(e->recv.sender_node_id),
            gm_ntoh_u8(e->recv.sender_port_id), gm_get_port_id(p));
    t->failures++;
  } else {
    gm_unknown(p, e);
  }
}

/* The program, its port (`port`, on both nodes) and its peer
   (gm_test.h). */
static struct gmt prog = {.name = "gm_resume", .port_id = 2, .waiting_for = "the start",
                          .handle_event = unasked};
static struct gm_port *other;     /* `closed port`, on node id 2, once opened */
static gm_alarm_t other_watchdog; /* its watchdog */
static unsigned int closed_id = 7;
static unsigned int seconds = 30;

/* The byte at offset i of the data message. */
static unsigned char data_byte(unsigned long i)
{
  return (unsigned char)(i * 29 + (i >> 8) + 0x41);
}

/* ---- waiting ---- */

/* Wait for the next control message at `port`, which must be of `kind`
   from the peer's `port`; its value. */
static unsigned long wait_message(enum kind kind, const char *what)
{
  prog.waiting_for = what;
  for (;;) {
    gm_recv_event_t *e = gm_blocking_receive(prog.port);
    if (gmt_is_message(e)) {
      const unsigned char *m = gm_ntohp(e->recv.message);
      unsigned int len = gm_ntoh_u32(e->recv.length);
      if (gm_ntoh_u16(e->recv.sender_node_id) != prog.peer ||
          gm_ntoh_u8(e->recv.sender_port_id) != prog.port_id || len != GMT_MSG_LEN ||
          gmt_get_be32(m) != (unsigned long)kind) {
        fprintf(stderr,
                "gm_resume: node id %u: waiting for %s, a message of %u bytes (kind %lu) from "
                "node id %u port %u\n",
                prog.me, what, len, len >= 4 ? gmt_get_be32(m) : 0ul,
                gm_ntoh_u16(e->recv.sender_node_id), gm_ntoh_u8(e->recv.sender_port_id));
        prog.failures++;
        return ~0ul;
      }
      return gmt_get_be32(m + 4);
    }
    gm_unknown(prog.port, e);
  }
}

/* ---- operations and their completions ---- */

/* A send (or a call with a callback): how many times its callback ran,
   with what status, and when among all the callbacks. */
struct op {
  const char *name;
  int calls;
  gm_status_t status;
  int seq;
};
static int callbacks;

static void completed(struct gm_port *p, void *context, gm_status_t status)
{
  struct op *o = context;
  (void)p;
  o->calls++;
  o->status = status;
  o->seq = ++callbacks;
}

static void wait_for(struct gm_port *p, struct op *o)
{
  prog.waiting_for = o->name;
  while (o->calls == 0)
    gmt_one_event(&prog, p);
}

/* `o`'s callback ran exactly once. */
static int once(struct op *o)
{
  if (o->calls != 1) {
    fprintf(stderr, "gm_resume: %s: %d completions, not 1\n", o->name, o->calls);
    prog.failures++;
    return 0;
  }
  return 1;
}

/* `o` completed exactly once, with `want`. */
static int completed_with(struct op *o, gm_status_t want)
{
  if (o->calls != 1 || o->status != want) {
    fprintf(stderr, "gm_resume: %s: %d completions, status %d (%s), not once with %d (%s)\n",
            o->name, o->calls, (int)o->status, gm_strerror(o->status), (int)want,
            gm_strerror(want));
    prog.failures++;
    return 0;
  }
  return 1;
}

/* Send control message (kind, value) from `buf` (8 bytes of DMA
   memory) to the peer's `port` and wait for its completion; `first`
   for the first message, which may find the peer's port not yet open
   (gmt_send_message). */
static int send_message(unsigned char *buf, enum kind kind, unsigned long value, int first,
                        const char *what)
{
  gmt_put_be32(buf, (unsigned long)kind);
  gmt_put_be32(buf + 4, value);
  return gmt_send_message(&prog, buf, first, what);
}

/* ---- node id 1 ---- */

static int sender(void)
{
  unsigned char *inbox[2], *ctl = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char *a = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char *b = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char *d = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char *ping = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char *data = gm_dma_malloc(prog.port, DATA_LEN);
  struct op first = {"the send to the closed port", 0, GM_SUCCESS, 0};
  struct op behind = {"the send queued behind it", 0, GM_SUCCESS, 0};
  struct op after = {"the send issued after the failure", 0, GM_SUCCESS, 0};
  struct op pinged = {"the send to the open port meanwhile", 0, GM_SUCCESS, 0};
  struct op dropped = {"gm_drop_sends' callback", 0, GM_SUCCESS, 0};
  struct op resumed = {"gm_resume_sending's callback", 0, GM_SUCCESS, 0};
  struct op last = {"the send after gm_resume_sending", 0, GM_SUCCESS, 0};
  int k, held_ok = 1;
  unsigned long i, verdict;

  inbox[0] = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  inbox[1] = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  if (!inbox[0] || !inbox[1] || !ctl || !a || !b || !d || !ping || !data) {
    fprintf(stderr, "gm_resume: out of DMA memory\n");
    return 0;
  }
  /* Buffers for node id 2's two messages: word that it opened the
     port, and its verdict. */
  for (k = 0; k < 2; k++)
    gm_provide_receive_buffer(prog.port, inbox[k], GMT_MSG_SIZE, GM_LOW_PRIORITY);
  if (!send_message(ctl, HELLO, 0, 1, "the hello"))
    return 0;

  /* Two sends to the closed port, back to back: the second is queued
     behind the first before the first can fail. */
  memset(a, 0xa1, GMT_MSG_LEN);
  memset(b, 0xb2, GMT_MSG_LEN);
  memset(d, 0xd4, GMT_MSG_LEN);
  gm_send_with_callback(prog.port, a, GMT_MSG_SIZE, GMT_MSG_LEN, GM_LOW_PRIORITY, prog.peer,
                        closed_id, completed, &first);
  gm_send_with_callback(prog.port, b, GMT_MSG_SIZE, GMT_MSG_LEN, GM_LOW_PRIORITY, prog.peer,
                        closed_id, completed, &behind);
  wait_for(prog.port, &first);
  if (completed_with(&first, GM_SEND_TARGET_PORT_CLOSED))
    printf("gm_resume: a send to closed port %u of node id %u: GM_SEND_TARGET_PORT_CLOSED\n",
           closed_id, prog.peer);

  /* The connection is disabled: a send issued now waits too. */
  gm_send_with_callback(prog.port, d, GMT_MSG_SIZE, GMT_MSG_LEN, GM_LOW_PRIORITY, prog.peer,
                        closed_id, completed, &after);

  /* Another port of the same node is another connection. */
  gmt_put_be32(ping, PING);
  gmt_put_be32(ping + 4, 0x5eed);
  gm_send_with_callback(prog.port, ping, GMT_MSG_SIZE, GMT_MSG_LEN, GM_LOW_PRIORITY, prog.peer,
                        prog.port_id, completed, &pinged);
  wait_for(prog.port, &pinged);
  if (completed_with(&pinged, GM_SUCCESS))
    printf("gm_resume: port %u of the same node is reached meanwhile\n", prog.port_id);

  /* Nothing completes the held sends but the program. */
  prog.waiting_for = "the pause with sends held";
  gmt_pause_ms(&prog, prog.port, HOLD_MS);
  if (behind.calls != 0 || after.calls != 0) {
    fprintf(stderr,
            "gm_resume: sends to a disabled connection completed before gm_drop_sends: %s %d "
            "times (status %d, %s), %s %d times (status %d, %s)\n",
            behind.name, behind.calls, (int)behind.status, gm_strerror(behind.status),
            after.name, after.calls, (int)after.status, gm_strerror(after.status));
    prog.failures++;
    held_ok = 0;
  }

  gm_drop_sends(prog.port, GM_LOW_PRIORITY, prog.peer, closed_id, completed, &dropped);
  wait_for(prog.port, &dropped);
  /* (A moment more, so that a late completion is seen and reported.) */
  gmt_pause_ms(&prog, prog.port, 20);
  if (once(&dropped) && held_ok &&
      completed_with(&behind, GM_SEND_DROPPED) && completed_with(&after, GM_SEND_DROPPED)) {
    if (behind.seq > dropped.seq || after.seq > dropped.seq) {
      fprintf(stderr, "gm_resume: gm_drop_sends' callback ran before the dropped sends'\n");
      prog.failures++;
    } else {
      printf("gm_resume: the held sends completed only at gm_drop_sends, with "
             "GM_SEND_DROPPED\n");
    }
  }

  /* Node id 2 opens the port, and says so. */
  if (!send_message(ctl, OPEN_IT, closed_id, 0, "the request to open the port"))
    return 0;
  if (wait_message(OPENED, "word that the port is open") != closed_id)
    return 0;

  gm_resume_sending(prog.port, GM_LOW_PRIORITY, prog.peer, closed_id, completed, &resumed);
  for (i = 0; i < DATA_LEN; i++)
    data[i] = data_byte(i);
  gm_send_with_callback(prog.port, data, gm_min_size_for_length(DATA_LEN), DATA_LEN,
                        GM_LOW_PRIORITY, prog.peer, closed_id, completed, &last);
  wait_for(prog.port, &resumed);
  wait_for(prog.port, &last);
  once(&resumed);
  completed_with(&last, GM_SUCCESS);

  verdict = wait_message(VERDICT, "node id 2's verdict");
  if (verdict != 0) {
    fprintf(stderr, "gm_resume: node id 2 found %lu things wrong\n", verdict);
    prog.failures++;
  } else if (last.calls == 1 && last.status == GM_SUCCESS) {
    printf("gm_resume: after gm_resume_sending, %lu bytes to port %u arrived intact, and "
           "nothing else\n",
           DATA_LEN, closed_id);
  }

  /* No callback ran again since it was checked. */
  if (prog.failures == 0) {
    completed_with(&first, GM_SEND_TARGET_PORT_CLOSED);
    completed_with(&behind, GM_SEND_DROPPED);
    completed_with(&after, GM_SEND_DROPPED);
    completed_with(&pinged, GM_SUCCESS);
    once(&dropped);
    once(&resumed);
  }
  return prog.failures == 0;
}

/* ---- node id 2 ---- */

/* Wait for the data message at the opened port and check it. */
static void take_data(void)
{
  prog.waiting_for = "the message to the opened port";
  for (;;) {
    gm_recv_event_t *e = gm_blocking_receive(other);
    if (gmt_is_message(e)) {
      const unsigned char *m = gm_ntohp(e->recv.message);
      unsigned long len = gm_ntoh_u32(e->recv.length), i, wrong = 0;
      if (gm_ntoh_u16(e->recv.sender_node_id) != prog.peer ||
          gm_ntoh_u8(e->recv.sender_port_id) != prog.port_id || len != DATA_LEN) {
        fprintf(stderr,
                "gm_resume: port %u: a message of %lu bytes from node id %u port %u, not %lu "
                "bytes from node id %u port %u (a dropped send?)\n",
                closed_id, len, gm_ntoh_u16(e->recv.sender_node_id),
                gm_ntoh_u8(e->recv.sender_port_id), DATA_LEN, prog.peer, prog.port_id);
        prog.failures++;
        continue;
      }
      for (i = 0; i < len; i++)
        if (m[i] != data_byte(i)) {
          if (wrong < 10)
            fprintf(stderr, "gm_resume: byte %lu of the message is %u, not %u\n", i, m[i],
                    data_byte(i));
          wrong++;
        }
      if (wrong)
        prog.failures++;
      return;
    }
    gm_unknown(other, e);
  }
}

static int receiver(void)
{
  unsigned char *inbox[3], *ctl = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  unsigned char *big, *small;
  unsigned long v;
  gm_status_t s;
  int k;

  for (k = 0; k < 3; k++) {
    inbox[k] = gm_dma_malloc(prog.port, GMT_MSG_LEN);
    if (!inbox[k]) {
      fprintf(stderr, "gm_resume: out of DMA memory\n");
      return 0;
    }
    /* The hello, the ping and the request to open the port. */
    gm_provide_receive_buffer(prog.port, inbox[k], GMT_MSG_SIZE, GM_LOW_PRIORITY);
  }
  if (!ctl)
    return 0;
  wait_message(HELLO, "the hello");
  v = wait_message(PING, "the ping");
  if (v != 0x5eed) {
    fprintf(stderr, "gm_resume: the ping says %#lx, not 0x5eed\n", v);
    prog.failures++;
  }
  v = wait_message(OPEN_IT, "the request to open the port");
  if (v != closed_id) {
    fprintf(stderr, "gm_resume: asked to open port %lu, not %u\n", v, closed_id);
    prog.failures++;
  }

  s = gm_open(&other, 0, closed_id, "gm_resume", GM_API_VERSION_2_0);
  if (s != GM_SUCCESS) {
    gm_perror("gm_resume: gm_open of the closed port", s);
    return 0;
  }
  gmt_watchdog(&prog, other, &other_watchdog, seconds);
  /* A buffer for the message expected, and one of the size of the
     dropped sends', which must never fill. */
  big = gm_dma_malloc(other, DATA_LEN);
  small = gm_dma_malloc(other, GMT_MSG_LEN);
  if (!big || !small) {
    fprintf(stderr, "gm_resume: out of DMA memory\n");
    return 0;
  }
  gm_provide_receive_buffer(other, big, gm_min_size_for_length(DATA_LEN), GM_LOW_PRIORITY);
  gm_provide_receive_buffer(other, small, GMT_MSG_SIZE, GM_LOW_PRIORITY);
  if (!send_message(ctl, OPENED, closed_id, 0, "word that the port is open"))
    return 0;

  take_data();
  prog.waiting_for = "the quiet after the message";
  gmt_pause_ms(&prog, other, QUIET_MS);

  if (!send_message(ctl, VERDICT, (unsigned long)prog.failures, 0, "the verdict"))
    return 0;
  gm_cancel_alarm(&other_watchdog);
  gm_close(other);
  if (prog.failures == 0)
    printf("gm_resume: port %u, opened when asked, got %lu bytes intact and nothing else\n",
           closed_id, DATA_LEN);
  return prog.failures == 0;
}

int main(int argc, char **argv)
{
  struct gmt_option options[] = {
      {'p', &prog.port_id}, {'c', &closed_id}, {'t', &seconds}, {0, NULL}};
  gm_alarm_t watchdog;
  int ok, status;

  if (!gmt_options(argc, argv, options) || seconds < 1 || closed_id == prog.port_id) {
    fprintf(stderr, "usage: %s [-p port] [-c closed port, not the port] [-t seconds]\n",
            argv[0]);
    return 2;
  }
  if (!gmt_open(&prog) || !gmt_pair(&prog))
    return 1;
  gmt_watchdog(&prog, prog.port, &watchdog, seconds);

  ok = prog.me == 1 ? sender() : receiver();

  status = gmt_close(&prog, &watchdog, ok);
  if (status == 0 && prog.me == 1)
    printf("gm_resume: ok\n");
  return status;
}
