/* A RequestStream's attributes read and written by name, for push_rows (_directrows.c,
 * _typedrows.c; the extension detok._native._chunkpush), through CPython's public
 * PyObject_GetAttr / PyObject_SetAttr with names interned once. */
#ifndef DETOK_STREAMSLOTS_H
#define DETOK_STREAMSLOTS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef enum {
    SL_PUSH_QUEUED, SL_FINISH, SL_TYPED, SL_CHUNKS, SL_LOGPROBS, SL_RECEIVED, SL_PUSHER, SL_WAITER, SL_TOKENS,
    SL_PUSH_ERROR, SL_NEXT_TOKEN, N_STREAM_SLOTS
} StreamSlot;

extern PyObject *detok_slot_names[N_STREAM_SLOTS];

int detok_streamslots_init(void);

/* stream.<which>: a new reference, or NULL with an exception set */
static inline PyObject *detok_stream_get(PyObject *stream, StreamSlot which) {
    return PyObject_GetAttr(stream, detok_slot_names[which]);
}

/* stream.<which> = value: 0, or -1 with an exception set */
static inline int detok_stream_set(PyObject *stream, StreamSlot which, PyObject *value) {
    return PyObject_SetAttr(stream, detok_slot_names[which], value);
}

#endif
