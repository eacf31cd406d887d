// core/ds/list.h — intrusive doubly linked list with O(1) insert and remove.
//
// Owns nothing and locks nothing: every list lives inside a structure whose lock
// (documented there) protects it. Elements embed `prev`/`next` pointers.
#pragma once

#include <cstddef>

namespace uslab {

template <typename T>
class IntrusiveList {
 public:
  bool empty() const { return head_ == nullptr; }
  T* front() const { return head_; }
  size_t size() const { return size_; }

  void push_front(T* e) {
    e->prev = nullptr;
    e->next = head_;
    if (head_) head_->prev = e;
    head_ = e;
    size_++;
  }

  void remove(T* e) {
    if (e->prev)
      e->prev->next = e->next;
    else
      head_ = e->next;
    if (e->next) e->next->prev = e->prev;
    e->prev = e->next = nullptr;
    size_--;
  }

  T* pop_front() {
    T* e = head_;
    if (e) remove(e);
    return e;
  }

 private:
  T* head_ = nullptr;
  size_t size_ = 0;
};

}  // namespace uslab
