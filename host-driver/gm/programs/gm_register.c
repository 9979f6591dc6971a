/*
 * gm_register: memory the program got from malloc, its static data and
 * its stack, registered with gm_register_memory and used as GM allowed:
 * sent from, received into, put into and got from by another process,
 * by the program's own addresses. Written only against GM's interface.
 *
 * Run one process on each of two nodes (NIC_CLUSTER and NIC_NODE say
 * which):
 *
 *   gm_register [-p port] [-t seconds]
 *
 * Node id 2 registers a malloc'd region and tells node id 1 its address;
 * node id 1 gets from it and puts into it, into its own malloc'd memory
 * and from it, and says so. Node id 2 then sends from a static array and
 * from its stack into node id 1's malloc'd receive buffers. Each checks every
 * byte, and node id 2 checks its region again after deregistering it, then
 * registers and deregisters a buffer on its stack 4096 times, at every
 * depth of a page (the pages hold the frames of the calls too).
 * Exit status 0 when all is right, 1 if not.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gm_test.h"

#define REGION 70000
#define GOT 30000
#define PUT_AT 1000
#define PUT 20000
#define STATIC_LEN 10000
#define STACK_LEN 6000
#define DATA_SIZE 14

static struct gmt prog = {.name = "gm_register", .port_id = 2, .waiting_for = "the start",
                          .handle_event = NULL};

static unsigned char static_area[STATIC_LEN];

static unsigned char byte_of(int which, unsigned long i)
{
  return (unsigned char)(which * 41 + i * 7 + (i >> 8));
}

static void fill(unsigned char *b, unsigned long len, int which)
{
  unsigned long i;
  for (i = 0; i < len; i++)
    b[i] = byte_of(which, i);
}

/* Bytes of `b` that differ from pattern `which` at offsets from `from`. */
static unsigned long wrong(const unsigned char *b, unsigned long len, int which,
                           unsigned long from)
{
  unsigned long i, n = 0;
  for (i = 0; i < len; i++)
    n += b[i] != byte_of(which, from + i);
  return n;
}

static void must(int ok, const char *what)
{
  if (!ok) {
    fprintf(stderr, "gm_register: node id %u: %s\n", prog.me, what);
    prog.failures++;
  }
}

/* Control messages: buffers of DMA memory. */
static unsigned char *msg;

static void provide_messages(int n)
{
  int i;
  for (i = 0; i < n; i++)
    gm_provide_receive_buffer(prog.port, gm_dma_malloc(prog.port, GMT_MSG_LEN), GMT_MSG_SIZE,
                              GM_LOW_PRIORITY);
}

struct op {
  int done;
  gm_status_t status;
};

static void op_done(struct gm_port *p, void *context, gm_status_t status)
{
  struct op *o = context;
  (void)p;
  o->done = 1;
  o->status = status;
}

static void wait_op(struct op *o, const char *what)
{
  prog.waiting_for = what;
  while (!o->done)
    gmt_one_event(&prog, prog.port);
  must(o->status == GM_SUCCESS, what);
}

/* Node id 1: gets from and puts into the other's malloc'd region, and
   receives its static and stack data into malloc'd buffers. */
static int user(void)
{
  unsigned char *mine = malloc(40000), *inbox = malloc(2 * 16384 + 100);
  unsigned char m[GMT_MSG_LEN];
  gm_u64_t region;
  struct op get = {0, GM_SUCCESS}, put = {0, GM_SUCCESS};
  int k;

  msg = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  must(mine && inbox && msg, "malloc");
  must(gm_register_memory(prog.port, mine, 40000) == GM_SUCCESS, "registering malloc'd memory");
  must(gm_register_memory(prog.port, inbox, 2 * 16384 + 100) == GM_SUCCESS,
       "registering malloc'd receive buffers");
  /* Receive buffers in malloc'd memory (not page aligned). */
  gm_provide_receive_buffer(prog.port, inbox + 50, DATA_SIZE, GM_LOW_PRIORITY);
  gm_provide_receive_buffer(prog.port, inbox + 50 + 16384, DATA_SIZE, GM_LOW_PRIORITY);
  provide_messages(2);

  gmt_wait_message(&prog, m, "the region's address");
  region = gmt_get_be64(m);

  memset(mine, 0, 40000);
  gm_get(prog.port, region, mine, GOT, GM_LOW_PRIORITY, prog.peer, prog.port_id, op_done, &get);
  wait_op(&get, "the get");
  must(wrong(mine, GOT, 1, 0) == 0, "the bytes got from the region");

  fill(mine, PUT, 2);
  gm_put(prog.port, mine, region + PUT_AT, PUT, GM_LOW_PRIORITY, prog.peer, prog.port_id,
         op_done, &put);
  wait_op(&put, "the put");
  printf("gm_register: got %d bytes from malloc'd memory of node id %u intact, put %d into it\n",
         GOT, prog.peer, PUT);
  must(gmt_send_message(&prog, msg, 0, "done"), "done");

  /* The other's static and stack data, in either order. */
  prog.waiting_for = "the static and stack data";
  for (k = 0; k < 2;) {
    gm_recv_event_t *e = gm_blocking_receive(prog.port);
    if (gmt_is_message(e) && gm_ntoh_u8(e->recv.size) == DATA_SIZE) {
      unsigned char *b = gm_ntohp(e->recv.buffer);
      unsigned int len = gm_ntoh_u32(e->recv.length);
      must(b == inbox + 50 || b == inbox + 50 + 16384, "a data message in a buffer provided");
      must(len == STATIC_LEN || len == STACK_LEN, "a data message's length");
      must(wrong(b, len, len == STATIC_LEN ? 3 : 4, 0) == 0, "a data message's bytes");
      k++;
    } else {
      gm_unknown(prog.port, e);
    }
  }
  printf("gm_register: %d bytes sent from static memory and %d from the stack arrived intact in "
         "malloc'd buffers\n",
         STATIC_LEN, STACK_LEN);

  must(gmt_send_message(&prog, msg, 0, "the end"), "the end");
  must(gm_deregister_memory(prog.port, mine, 40000) == GM_SUCCESS, "deregistering");
  must(gm_deregister_memory(prog.port, inbox, 2 * 16384 + 100) == GM_SUCCESS, "deregistering");
  free(mine);
  free(inbox);
  return !prog.failures;
}

/* Register and deregister a buffer on the stack `pad` bytes below this
   frame, the pages registered holding the frames of the calls too; 1 if
   the buffer was not intact afterwards. */
static int stack_cycle(int pad)
{
  volatile unsigned char below[pad + 1];
  unsigned char area[3000];
  int bad;
  below[0] = 0;
  fill(area, sizeof area, 5);
  must(gm_register_memory(prog.port, area, sizeof area) == GM_SUCCESS,
       "registering the stack again");
  must(gm_deregister_memory(prog.port, area, sizeof area) == GM_SUCCESS,
       "deregistering the stack again");
  bad = wrong(area, sizeof area, 5, 0) != 0;
  return bad + below[0];
}

/* The cycle `times` times, the buffer 16 bytes lower each time: its
   pages' edges meet every depth of the calls' frames. The cycles after
   which the buffer was not intact (0: none). */
#define CYCLES 4096
static int stack_cycles(int times)
{
  int i, bad = 0;
  for (i = 0; i < times; i++)
    bad += stack_cycle((i * 16) % 8192);
  return bad;
}

/* Node id 2: its malloc'd region for the other to get from and put into;
   then data from static memory and the stack. */
static int owner(void)
{
  unsigned char *region = malloc(REGION);
  unsigned char stack_area[STACK_LEN];
  unsigned char m[GMT_MSG_LEN];
  unsigned long bad;

  msg = gm_dma_malloc(prog.port, GMT_MSG_LEN);
  must(region != NULL && msg != NULL, "malloc");
  fill(region, REGION, 1);
  must(gm_register_memory(prog.port, region, REGION) == GM_SUCCESS,
       "registering malloc'd memory");
  must(wrong(region, REGION, 1, 0) == 0, "the region's content kept by registering it");
  provide_messages(2);

  gmt_put_be64(msg, (gm_u64_t)(gm_size_t)region);
  must(gmt_send_message(&prog, msg, 1, "the region's address"), "the address");

  gmt_wait_message(&prog, m, "done");
  /* The put's bytes at their place, the region's own around them. */
  bad = wrong(region, PUT_AT, 1, 0) + wrong(region + PUT_AT, PUT, 2, 0) +
        wrong(region + PUT_AT + PUT, REGION - PUT_AT - PUT, 1, PUT_AT + PUT);
  must(bad == 0, "the region after the put");
  fill(static_area, STATIC_LEN, 3);
  fill(stack_area, STACK_LEN, 4);
  must(gm_register_memory(prog.port, static_area, STATIC_LEN) == GM_SUCCESS,
       "registering static memory");
  must(gm_register_memory(prog.port, stack_area, STACK_LEN) == GM_SUCCESS,
       "registering the stack");
  must(gmt_send_and_wait(&prog, static_area, DATA_SIZE, STATIC_LEN) == GM_SUCCESS,
       "sending from static memory");
  must(gmt_send_and_wait(&prog, stack_area, DATA_SIZE, STACK_LEN) == GM_SUCCESS,
       "sending from the stack");

  gmt_wait_message(&prog, m, "the end");
  must(gm_deregister_memory(prog.port, region, REGION) == GM_SUCCESS, "deregistering");
  must(gm_deregister_memory(prog.port, static_area, STATIC_LEN) == GM_SUCCESS,
       "deregistering static memory");
  must(gm_deregister_memory(prog.port, stack_area, STACK_LEN) == GM_SUCCESS,
       "deregistering the stack");
  /* Deregistered, the memory is the program's as it was. */
  must(wrong(region + PUT_AT, PUT, 2, 0) == 0 && wrong(region, PUT_AT, 1, 0) == 0,
       "the region after deregistering");
  region[0] ^= 0xff;
  must(region[0] == (unsigned char)(byte_of(1, 0) ^ 0xff), "writing the region afterwards");
  must(wrong(static_area, STATIC_LEN, 3, 0) == 0, "static memory afterwards");
  must(stack_cycles(CYCLES) == 0, "a stack buffer registered again and again");
  if (!prog.failures)
    printf("gm_register: a stack buffer registered and deregistered %d times, intact\n", CYCLES);
  if (!prog.failures)
    printf("gm_register: malloc'd region of %d bytes: %d put bytes and the rest intact, and "
           "after deregistration\n",
           REGION, PUT);
  free(region);
  return !prog.failures;
}

int main(int argc, char **argv)
{
  return gmt_pair_main(&prog, argc, argv, user, owner);
}
