/* A parsed request's reasoning, content and tool-call argument rows written as they are dispatched
 * (part of push_rows, detok/_native/_directrows.c; the extension detok._native._chunkpush).
 * detok_push_typed_row is called for a row of DeltaBatch.kinds 1, 2 or 3 whose stream passed the
 * batch-level checks (not finished nor given typed rows by the batch, no logprob entries, no row of
 * its left to the Python path before it). */
#include "_textpusher.h"
#include "_streamfields.h"

/* a parsed request's row of one kind (1 reasoning, 2 content, 3 arguments of its last call opened)
 * written at once: 1; left to the caller: 0; an error: -1. As the Python path (TypedState.feed_kind,
 * then TypedChoice.chunks of a delta of that row alone): the state's char count of that kind (of
 * that call's arguments) advanced; the content's text chunk, the reasoning's field chunk (none when
 * the request does not show its reasoning), the call's arguments fragment (none for a call past the
 * first when parallel_tool_calls is false; its sent count kept as TypedChoice keeps it) written. */
int detok_push_typed_row(PyObject *stream, int kind, PyObject *text, PyObject *offset, PyObject *count) {
    PyObject *state_obj = ((StreamFields *)stream)->typed;
    /* (no state yet: the Python path makes it; a state of another layout: the Python path's) */
    if (state_obj == NULL || !PyObject_TypeCheck(state_obj, &detok_TypedFieldsType)) return 0;
    TypedFields *state = (TypedFields *)Py_NewRef(state_obj);
    PyObject **have_field = kind == 1 ? &state->reasoning : &state->content;
    PyObject *have = NULL, *waiter = NULL, *s = Py_None, *end = NULL;
    PyObject *args = NULL, *call = NULL; /* kind 3: the state's argument counts, the call's index */
    TextPusher *pusher = NULL;
    int r = detok_empty_list(state->new_reasoning) && detok_empty_list(state->new_calls);
    if (r == 1 && kind == 3) { /* (no call opened yet: the Python path counts the gap) */
        call = Py_XNewRef(state->last_call);
        args = Py_XNewRef(state->args);
        if (call == NULL || args == NULL || !PyLong_CheckExact(call) || !PyDict_CheckExact(args) || PyLong_AsSsize_t(call) < 0) {
            r = PyErr_Occurred() ? -1 : 0;
        } else {
            have = PyDict_GetItemWithError(args, call);
            if (have == NULL && PyErr_Occurred()) r = -1;
            else have = have == NULL ? PyLong_FromLong(0) : Py_NewRef(have);
            if (have == NULL) r = -1;
        }
    } else if (r == 1) {
        have = Py_XNewRef(*have_field);
        if (have == NULL) r = 0;
    }
    if (r == 1) r = PyLong_CheckExact(have) ? PyObject_RichCompareBool(have, offset, Py_EQ) : 0;
    if (r == 1) {
        s = detok_direct_stream(stream, offset, &waiter, &pusher, 1);
        r = s == NULL ? -1 : s != Py_None;
        if (r == 1 && kind == 3 && pusher->sent_args == NULL) r = 0; /* (its tool calls are the consumer's) */
    }
    if (r == 1 && count != NULL && detok_keep_count(stream, count) < 0) r = -1;
    Py_ssize_t chars = PyUnicode_GET_LENGTH(text), index = r == 1 && kind == 3 ? PyLong_AsSsize_t(call) : -1;
    if (r == 1) {
        PyObject *len = PyLong_FromSsize_t(chars);
        end = len == NULL ? NULL : PyNumber_Add(offset, len);
        Py_XDECREF(len);
        if (end == NULL || (kind == 3 && PyDict_SetItem(args, call, end) < 0)) r = -1;
        else if (kind != 3) Py_XSETREF(*have_field, Py_NewRef(end));
    }
    int shown = kind == 2 || (kind == 1 && pusher != NULL && pusher->reasoning != NULL)
        || (kind == 3 && pusher != NULL && (pusher->parallel || index == 0));
    if (r == 1 && kind == 3 && shown) { /* the chars sent of the call, as TypedChoice._fragments counts them */
        PyObject *sent = PyDict_GetItemWithError(pusher->sent_args, call), *total = NULL;
        if (sent == NULL && PyErr_Occurred()) r = -1;
        PyObject *len = r == 1 ? PyLong_FromSsize_t(chars) : NULL;
        if (len != NULL) total = sent != NULL ? PyNumber_Add(sent, len) : Py_NewRef(len);
        if (total == NULL || PyDict_SetItem(pusher->sent_args, call, total) < 0) r = -1;
        Py_XDECREF(len);
        Py_XDECREF(total);
    }
    if (r == 1 && shown) {
        int w = kind == 2 ? detok_push_chunk(pusher, text, NULL)
            : kind == 1 ? detok_push_reasoning(pusher, text) : detok_push_arguments(pusher, index, text);
        if (w < 0 && detok_hand_over(stream, waiter) < 0) r = -1;
    }
    Py_DECREF(state);
    Py_XDECREF(have);
    Py_XDECREF(end);
    Py_XDECREF(args);
    Py_XDECREF(call);
    Py_XDECREF(waiter);
    Py_XDECREF(pusher);
    if (s != Py_None) Py_XDECREF(s);
    return r;
}
