! fortran2.f90 with the `use mpi_f08` bindings (handles as TYPE(MPI_Comm),
! TYPE(MPI_Request), TYPE(MPI_Status), ...), run on N = 4; the calls and their
! arguments are those of fortran2.f90, so the same trace is expected:
!   MPI_Gatherv, MPI_Scatterv, MPI_Allgatherv (root 0, rank r contributes r+1 integers,
!   receives 2(r+1) from the Scatterv); MPI_Sendrecv of 6 integers tag 14; Irecv+Isend
!   pairs of 4 integers completed by MPI_Waitany (tag 11), MPI_Waitsome (12),
!   MPI_Testall (13), MPI_Testany (15), MPI_Testsome (16); MPI_Comm_split_type + Bcast,
!   MPI_Cart_create + Barrier, MPI_Cart_sub + Allreduce, MPI_Comm_create of the even
!   ranks + Barrier.
program fortran2_f08_test
  use mpi_f08
  implicit none
  integer :: ierr, r, n, right, left, i, idx, outcount, done, nsub
  type(MPI_Request) :: reqs(2)
  type(MPI_Status) :: sts(2), st
  integer :: idxs(2)
  integer :: a(64), b(64), sc(4), sd(4), rc(4), rd(4)
  type(MPI_Comm) :: shm, cart, sub, evencomm
  type(MPI_Group) :: grp, evengrp
  integer :: dims(1), evens(2)
  logical :: periods(1), remain(1), flag
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, r, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, n, ierr)
  right = mod(r + 1, n)
  left = mod(r - 1 + n, n)
  a = r
  do i = 1, n
    rc(i) = i
    rd(i) = 8 * (i - 1)
    sc(i) = 2 * i
    sd(i) = 8 * (i - 1)
  end do
  call MPI_Gatherv(a, r + 1, MPI_INTEGER, b, rc, rd, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  call MPI_Scatterv(a, sc, sd, MPI_INTEGER, b, 2 * (r + 1), MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  call MPI_Allgatherv(a, r + 1, MPI_INTEGER, b, rc, rd, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call MPI_Sendrecv(a, 6, MPI_INTEGER, right, 14, b, 6, MPI_INTEGER, left, 14, &
                    MPI_COMM_WORLD, st, ierr)

  call MPI_Irecv(b, 4, MPI_INTEGER, left, 11, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 4, MPI_INTEGER, right, 11, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Waitany(2, reqs, idx, st, ierr)
  call MPI_Waitany(2, reqs, idx, MPI_STATUS_IGNORE, ierr)

  call MPI_Irecv(b, 4, MPI_INTEGER, left, 12, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 4, MPI_INTEGER, right, 12, MPI_COMM_WORLD, reqs(2), ierr)
  done = 0
  do while (done < 2)
    call MPI_Waitsome(2, reqs, outcount, idxs, sts, ierr)
    if (outcount /= MPI_UNDEFINED) done = done + outcount
  end do

  call MPI_Irecv(b, 4, MPI_INTEGER, left, 13, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 4, MPI_INTEGER, right, 13, MPI_COMM_WORLD, reqs(2), ierr)
  flag = .false.
  do while (.not. flag)
    call MPI_Testall(2, reqs, flag, MPI_STATUSES_IGNORE, ierr)
  end do

  call MPI_Irecv(b, 4, MPI_INTEGER, left, 15, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 4, MPI_INTEGER, right, 15, MPI_COMM_WORLD, reqs(2), ierr)
  done = 0
  do while (done < 2)
    call MPI_Testany(2, reqs, idx, flag, st, ierr)
    if (flag .and. idx /= MPI_UNDEFINED) done = done + 1
  end do

  call MPI_Irecv(b, 4, MPI_INTEGER, left, 16, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 4, MPI_INTEGER, right, 16, MPI_COMM_WORLD, reqs(2), ierr)
  done = 0
  do while (done < 2)
    call MPI_Testsome(2, reqs, outcount, idxs, MPI_STATUSES_IGNORE, ierr)
    if (outcount /= MPI_UNDEFINED) done = done + outcount
  end do

  call MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, shm, ierr)
  call MPI_Bcast(a, 3, MPI_INTEGER, 0, shm, ierr)
  dims(1) = n
  periods(1) = .true.
  call MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, .false., cart, ierr)
  call MPI_Barrier(cart, ierr)
  remain(1) = .true.
  call MPI_Cart_sub(cart, remain, sub, ierr)
  call MPI_Comm_size(sub, nsub, ierr)
  call MPI_Allreduce(a, b, 2, MPI_INTEGER, MPI_SUM, sub, ierr)
  call MPI_Comm_group(MPI_COMM_WORLD, grp, ierr)
  evens(1) = 0
  evens(2) = 2
  call MPI_Group_incl(grp, 2, evens, evengrp, ierr)
  call MPI_Comm_create(MPI_COMM_WORLD, evengrp, evencomm, ierr)
  if (evencomm /= MPI_COMM_NULL) call MPI_Barrier(evencomm, ierr)
  call MPI_Finalize(ierr)
end program fortran2_f08_test
