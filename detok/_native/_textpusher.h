/* The compiled text pusher's state, shared by _chunkpush.c (the type) and _directrows.c (the
 * receiver's rows written as they arrive); both build into one extension, detok._native._chunkpush. */
#ifndef DETOK_TEXTPUSHER_H
#define DETOK_TEXTPUSHER_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_streamfields.h"

typedef struct {
    PyObject_HEAD
    /* take: the stream's own take (RequestStream.take_text, or take_items in chat items mode),
     * called with the stream */
    PyObject *fallback, *take, *flow, *cycle, *write, *timer_text, *prefix, *suffix;
    PyObject *mid, *items_suffix; /* chat items mode (NULL: text alone) */
    /* a parsed chat choice's pusher (typed: reasoning and content rows written by push_rows; the
     * stream's own pushes go to the fallback): the reasoning chunk's prefix, NULL when not shown */
    int typed;
    PyObject *reasoning;
    /* its tool calls (NULL: their rows are the consumer's): the choice's TypedChoice.sent_args (call
     * index -> argument chars sent), the `"tool_calls":` chunk prefix, whether every call is shown
     * (parallel_tool_calls; else only call 0) */
    PyObject *sent_args, *calls_prefix;
    int parallel;
    vectorcallfunc vectorcall;
} TextPusher;

extern PyTypeObject detok_TextPusherType;

/* 1 if the client is there and reads (writes not paused, not disconnected), 0 if not, -1 on an error */
int detok_pusher_ready(TextPusher *t);
/* the chunk of `text` (and in chat items mode of `items`, a non-empty list; else NULL), the clock
 * ticked, written: 0, or -1 with an exception set */
int detok_push_chunk(TextPusher *t, PyObject *text, PyObject *items);
/* a typed pusher's reasoning chunk of `text` (t->reasoning set), the clock ticked, written */
int detok_push_reasoning(TextPusher *t, PyObject *text);
/* a typed pusher's tool-call chunk of call `index`'s argument fragment `text` (t->calls_prefix set) */
int detok_push_arguments(TextPusher *t, Py_ssize_t index, PyObject *text);
/* push_rows(...), the module function (see _directrows.c) */
PyObject *detok_push_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
int detok_directrows_init(void);

/* _directrows.c's checks on a stream (a StreamFields), shared with _typedrows.c: 1 if nothing
 * waits in it and no push is queued (typed: typed output may wait; stream_fields.idle_for_push),
 * else 0; the stream (a new reference) if its row can be written at once, with its waiter and
 * pusher (new references), Py_None (borrowed) if not, NULL on an error (typed: a parsed request's
 * row, whose offset the caller checked); its token count kept as the Python loop keeps it; a
 * write's Exception handed to its consumer as RequestStream._push hands it over */
int detok_fields_idle(StreamFields *f, int typed);
PyObject *detok_direct_stream(PyObject *stream, PyObject *offset, PyObject **waiter, TextPusher **pusher, int typed);
int detok_keep_count(PyObject *stream, PyObject *n);
int detok_hand_over(PyObject *stream, PyObject *waiter);
/* _typedrows.c: a parsed request's row of kind 1-3 written at once: 1; left: 0; an error: -1 */
int detok_push_typed_row(PyObject *stream, int kind, PyObject *text, PyObject *offset, PyObject *count);

#endif
