# frozen_string_literal: true

require "test_helper"
require "margay/log"
require "margay/cluster/heap"

# Margay::Cluster::Heap: the template's heap settled before forking; with a room
# (heap_room_before_fork) its object heap keeps that share of its slots free.
class HeapTest < Minitest::Test
  skip_on_jruby "JRuby's GC counts no heap slots"
  Heap = Margay::Cluster::Heap

  def test_make_room_leaves_the_share_free
    GC.start(full_mark: true, immediate_sweep: true)
    before = free_share
    room = [before + 0.15, 0.6].min # above what the heap has now, under Ruby's max ratio (0.65)
    assert_kind_of Integer, Heap.make_room(room)
    assert_operator free_share, :>=, room - 0.01, "the heap grew (it had #{before.round(2)} free)"
    slots = GC.stat(:heap_available_slots)
    Heap.make_room(room / 2)
    assert_equal slots, GC.stat(:heap_available_slots), "enough room already: the heap is left as it is"
  end

  def test_settle_logs_the_room_step
    out = StringIO.new
    steps = Heap.settle(compact: false, room: 0.3, log: Margay::Log.new(out: out), who: "test")
    assert_equal ["before", "4 full GCs", "malloc_trim"], steps.map(&:first).values_at(0, 1, 3)
    assert_match(/\A\d+ free slots \(30 %\)\z/, steps[2].first)
    assert_match(/test: heap settled before forking \(PSS\/RSS MiB\): before .*, \d+ free slots \(30 %\) /, out.string)
  end

  private

  def free_share
    stat = GC.stat
    stat[:heap_free_slots].fdiv(stat[:heap_available_slots])
  end
end
